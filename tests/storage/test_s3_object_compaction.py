"""Compaction on S3 (platform/log/_object_compaction.py): one conditional-PUT log entry a maintenance round,
the records taken from the partitions' tail caches (no small file read back), and a rewrite dropped when
another writer removed one of its files first. The table is read back by delta-rs: every acknowledged
record once, at its offset, in few files."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
from _s3_checks import check_acked, check_log, table_rows
from deltalake import DeltaTable
from s3_harness import S3Warehouse

from thread_runs import in_threads
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log._object_compaction import commit_object_rewrites
from topiclake.platform.log.file_index import build_index
from topiclake.platform.log.object_append import ObjectAppender

CONFIG = BrokerConfig(linger_ms=0, compact_min_files=4, checkpoint_interval=6, maintenance_interval_ms=100)


def _produce(broker: Broker, n: int, tag: str, acked: dict[str, tuple[int, int]]) -> None:
    """``n`` commits of one record to each of partitions 0 and 1 (a file per partition per commit)."""
    for i in range(n):
        values = [f"{tag}{i}-p{p}" for p in (0, 1)]
        records = [Record(value=v.encode(), partition=p) for p, v in enumerate(values)]
        for v, r in zip(values, broker.produce("t", records), strict=True):
            assert r.error is None, r
            acked[v] = (r.partition, r.offset)  # type: ignore[assignment]


def _files(storage: Storage) -> dict[int, int]:
    adds = pa.table(
        DeltaTable(storage.topic_uri("t"), storage_options=storage.options()).get_add_actions(flatten=True)
    )
    parts = adds["partition.partition"].to_pylist()
    return {p: parts.count(p) for p in set(parts)}


def test_rounds_commit_one_entry_each_from_memory(s3: S3Warehouse) -> None:
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, CONFIG) as broker:
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        stats = log.maintainer.stats
        _produce(broker, 24, "a", acked)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stats.compactions < 2:
            time.sleep(0.1)
        assert stats.compactions >= 2, stats  # both partitions compacted
        _produce(broker, 8, "b", acked)  # appends beside and after the rewrites
        time.sleep(0.5)
        assert stats.runs_from_memory == stats.compactions, stats  # no run read its files back
        assert stats.compaction_commits < stats.compactions, stats  # several runs share an entry
        assert stats.compactions_dropped == 0 and stats.failures == 0, stats
        versions = log.known_version()
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked) == 64
    files = _files(storage)
    assert max(files.values()) < 32, files  # 32 commits wrote 32 files a partition
    dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
    optimize = [c for c in dt.history(versions + 1) if c["operation"] == "OPTIMIZE"]
    assert len(optimize) == stats.compaction_commits >= 1


def test_a_rewrite_of_files_already_removed_is_dropped(s3: S3Warehouse) -> None:
    """Two rewrites of the same files from the same index: the second finds the first's removes (read by
    its own 412, or known to the flusher's appender) and is dropped; every record stays there once."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    config = BrokerConfig(linger_ms=0, compact_min_files=1000, checkpoint_interval=6)  # no round merges
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        fast = log._fast
        assert isinstance(fast, ObjectAppender)
        _produce(broker, 5, "a", acked)
        dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
        index = build_index(dt, storage.filesystem(storage.topic_uri("t")))
        inside = index.files(0)
        data = log.held_records(inside, inside[0].min_offset, inside[-1].max_offset)
        assert data is not None and data.num_rows == 5
        for own in (True, False):  # a rewrite the flusher's appender knows of, then one it has to read
            if not own:
                fast.unread = fast.version  # as after a snapshot refresh: it cannot tell
            first = commit_object_rewrites(fast, log.hold_commits, dt.version(), [(inside, data)])
            assert first is own, "the first rewrite lands; after it, the same files are gone"
            _produce(broker, 1, f"x{own}", acked)
            s3.proxy.record()
            assert commit_object_rewrites(fast, log.hold_commits, dt.version(), [(inside, data)]) is False
            put = [  # data files (a checkpoint the maintainer writes meanwhile is Parquet too)
                r[3]
                for r in s3.proxy.requests()
                if r[2] == "PUT" and r[3].endswith(".parquet") and "/_delta_log/" not in r[3]
            ]
            deleted = [r[3] for r in s3.proxy.requests() if r[1] == "DELETE"]
            s3.proxy.record(False)
            assert put and deleted == put, "the dropped rewrite's file is deleted (nothing references it)"
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked)


def test_log_entry_puts_cut_under_load_with_compaction(s3: S3Warehouse) -> None:
    """Log-entry PUTs the store took but whose answers were cut, while four producers write and rounds
    compact: every retry finds its own entry (appends and rewrites alike), so nothing is acknowledged twice
    or lost and the offsets stay contiguous."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    with Broker(storage, CONFIG) as broker:
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        s3.proxy.delay(0.005)

        def produce(i: int) -> None:
            mine: dict[str, tuple[int, int]] = {}
            _produce(broker, 12, f"p{i}-", mine)
            with lock:
                acked.update(mine)

        s3.proxy.cut_after_store(6, op="PUT", path_contains="/_delta_log/0")  # the next six entries
        errors = in_threads(4, produce)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and log.maintainer.stats.compaction_commits == 0:
            time.sleep(0.1)
        s3.proxy.delay(0)
        assert not errors, errors[0]
        cuts = s3.proxy.counts().get("cut_after_store", 0)
        assert cuts == 6, cuts
        assert log._fast.landed_unseen >= 1, "no retry found its own entry"
        assert log.maintainer.stats.compaction_commits >= 1, log.maintainer.stats
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked) == 4 * 12 * 2
