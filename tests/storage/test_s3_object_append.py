"""The object-store append path (platform/log/object_append.py) on S3 and Azure: what a commit sends, and
commits whose answer is lost.

Each test runs a broker on its own bucket behind the counting proxy. A steady commit is one PUT per data
file and one conditional PUT of its log entry, nothing else; a log-entry PUT the store took but whose
answer the proxy cut is recognised by the retry (its commit id in the entry at that version): acknowledged
once, in the table once. The entries are read back by delta-rs, which checks them against the protocol.
"""

from __future__ import annotations

import random
import threading
import time

import pyarrow as pa
from _s3_checks import check_acked, check_log, produce_keyed, table_rows
from deltalake import DeltaTable
from store_harness import Warehouse

from thread_runs import in_threads
from topiclake.platform import Broker, BrokerConfig, Storage, produce_rows
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.log.rows import Rows


def test_a_commit_is_its_data_puts_and_one_conditional_put(store: Warehouse) -> None:
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, BrokerConfig(linger_ms=0, maintenance_interval_ms=60_000)) as broker:
        broker.create_topic("t", partitions=1)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender), "keys and conditional put: the object path"
        produce_keyed(broker, ["warm-up"], acked)
        store.proxy.reset()
        before = log.commits
        for i in range(10):
            produce_keyed(broker, [f"v{i}-{j}" for j in range(5)], acked)
        commits = log.commits - before
        counts = store.proxy.counts()
    assert commits == 10
    assert counts == {"PUT": 2 * commits}, counts  # no LIST, no GET, no HEAD on the steady path
    rows = table_rows(storage, "t")
    check_log(rows, 1)
    check_acked(acked, rows)
    assert len(rows) == len(acked)
    dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
    history = dt.history(commits)
    assert all(c["operation"] == "WRITE" for c in history)
    adds = pa.table(dt.get_add_actions(flatten=True))  # the statistics delta-rs reads from our entries
    assert sum(adds["num_records"].to_pylist()) == len(rows)
    assert set(adds["partition.partition"].to_pylist()) == {0}
    assert min(adds["min.offset"].to_pylist()) == 0 and max(adds["max.offset"].to_pylist()) == len(rows) - 1


def test_log_entry_put_cut_after_the_store_took_it_is_acknowledged_once(store: Warehouse) -> None:
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, BrokerConfig(linger_ms=0)) as broker:
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        produce_keyed(broker, ["before"], acked)
        version = log.known_version()
        store.proxy.cut_after_store(1, op="PUT", path_contains="/_delta_log/")
        produce_keyed(broker, ["cut-0", "cut-1", "cut-2"], acked)
        assert store.proxy.counts().get("cut_after_store") == 1, "the fault did not fire"
        assert log._fast.landed_unseen == 1  # the retry found its own entry at that version
        assert log.known_version() == version + 1, "the commit took one version, not two"
        produce_keyed(broker, ["after"], acked)
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert sorted(r[0] for r in rows) == sorted(acked)  # nothing twice, nothing lost


def test_data_file_put_cut_after_the_store_took_it_is_retried(store: Warehouse) -> None:
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, BrokerConfig(linger_ms=0)) as broker:
        broker.create_topic("t", partitions=1)
        produce_keyed(broker, ["before"], acked)
        store.proxy.cut_after_store(1, op="PUT", path_contains=".parquet")
        produce_keyed(broker, ["cut"], acked)
        assert store.proxy.counts().get("cut_after_store") == 1
    rows = table_rows(storage, "t")
    check_log(rows, 1)
    check_acked(acked, rows)
    assert len(rows) == 2


def test_lost_version_to_a_delta_rs_writer_retries_at_the_next(store: Warehouse) -> None:
    """A commit of another writer (here delta-rs: a table property change) takes the version the
    appender expects: its PUT answers 412, one GET reads the winner, the next version is taken."""
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, BrokerConfig(linger_ms=0, maintenance_interval_ms=60_000)) as broker:
        broker.create_topic("t", partitions=1)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        produce_keyed(broker, ["a"], acked)
        dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
        # a metaData action of delta-rs: the appender's PUT answers 412, it refreshes, checks, goes on
        dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 11 seconds"})
        produce_keyed(broker, ["b"], acked)
        produce_keyed(broker, ["c"], acked)
        assert log._fast.races >= 1
    rows = table_rows(storage, "t")
    check_log(rows, 1)
    check_acked(acked, rows)
    assert len(rows) == 3


def test_files_stored_during_the_previous_log_put_under_load(store: Warehouse) -> None:
    """Eight producers out of step on a store answering in 20 ms: commits use files stored while the
    previous log entry's PUT was in flight; every acknowledged record is in the table once, at its offset."""
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    # not lingering on while requests arrive (object_linger_max_ms): commits follow the store's round trip
    with Broker(storage, BrokerConfig(linger_ms=0, object_linger_max_ms=0)) as broker:
        broker.create_topic("t", partitions=3)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        store.proxy.delay(0.02)

        def produce(i: int) -> None:
            rng = random.Random(i)  # producers out of step: requests arrive while a commit is in flight
            for n in range(15):
                time.sleep(rng.uniform(0, 0.05))
                mine: dict[str, tuple[int, int]] = {}
                produce_keyed(broker, [f"p{i}-{n}-{j}" for j in range(20)], mine)
                with lock:
                    acked.update(mine)

        errors = in_threads(8, produce)
        store.proxy.delay(0)
        assert not errors, errors[0]
        assert log._fast.stored_ahead > 0, "no commit used files stored ahead"
    rows = table_rows(storage, "t")
    check_log(rows, 3)
    check_acked(acked, rows)
    assert len(rows) == len(acked) == 8 * 15 * 20


def test_acknowledged_records_are_read_at_once_from_the_tails_and_by_delta_rs(store: Warehouse) -> None:
    """A commit of many partitions is built partition by partition and its tails take slices of it: right
    after a request's answer each record is fetched at its offset without reading a data file back (from
    the partition's tail) and delta-rs reads it in the table."""
    storage = Storage(store.uri, store.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, BrokerConfig(linger_ms=0, maintenance_interval_ms=60_000)) as broker:
        broker.create_topic("t", partitions=3)
        assert isinstance(broker.log("t")._fast, ObjectAppender)
        for n in range(3):  # each request spread over the three partitions by key
            values = [f"r{n}-{j}" for j in range(60)]
            # queued as the HTTP produce path queues (lists, one Arrow table built per flush)
            rows = Rows([v.encode() for v in values], [v.encode() for v in values], [None] * 60, [None] * 60)
            pending = produce_rows.start(broker, "t", rows, [None] * 60, acks="all")
            assert pending is not None and pending.handle is not None
            pending.handle.wait(60)
            mine = {v: (r.partition, r.offset) for v, r in zip(values, pending.finish(), strict=True)}
            assert len({p for p, _ in mine.values()}) == 3
            store.proxy.record(True)
            for value, (partition, offset) in mine.items():
                got = broker.fetch("t", partition, offset, max_records=1)
                assert got.records["value"].to_pylist() == [value.encode()], (value, partition, offset)
                assert got.records["offset"].to_pylist() == [offset]
            # the first fetch opens the reader's snapshot (log entries); no data file is read back
            files = [path for _t, _op, _m, path in store.proxy.requests() if ".parquet" in path]
            store.proxy.record(False)
            assert files == [], f"fetched from the store, not the tails: {files}"
            dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
            found = {v.decode() for v in dt.to_pyarrow_table(columns=["value"])["value"].to_pylist()}
            assert set(mine) <= found
            acked.update(mine)
    rows = table_rows(storage, "t")
    check_log(rows, 3)
    check_acked(acked, rows)
    assert len(rows) == len(acked)
