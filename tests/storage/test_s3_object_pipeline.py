"""Pipelined commits on object storage (issue 28): a flush of a closed loop of producers becomes two
commits whose round trips overlap, and files stored ahead never reach the table without their commit.

S3 only (the object path is the same code on Azure, tested there by test_s3_object_append.py).
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import pytest
from _s3_checks import check_acked, check_log, produce_keyed, table_rows
from deltalake import DeltaTable
from s3_harness import S3Warehouse

from thread_runs import in_threads
from topiclake.errors import TopiclakeError
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log.object_append import ObjectAppender


def _name(path: str) -> str:
    return urlparse(path).path.rsplit("/", 1)[-1]  # part-<uuid>-c000.snappy.parquet


def test_closed_loop_producers_commit_in_two_overlapping_halves(s3: S3Warehouse) -> None:
    """Four producers, each waiting for its answer before the next request, on a store answering in
    20 ms: flushes are split in two, and the producers the first half acknowledged are gathered and their
    files stored while the second half's entry is PUT (more commits stored ahead than flushes split);
    every acknowledged record is in the table once, at its offset."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    config = BrokerConfig(maintenance_interval_ms=60_000, object_pipeline_max_bytes=1 << 20)
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=3)
        log = broker.log("t")
        fast = log._fast
        assert isinstance(fast, ObjectAppender)
        s3.proxy.delay(0.02)

        def produce(i: int) -> None:
            for n in range(12):
                mine: dict[str, tuple[int, int]] = {}
                produce_keyed(broker, [f"p{i}-{n}-{j}" for j in range(30)], mine)
                with lock:
                    acked.update(mine)

        errors = in_threads(4, produce)
        s3.proxy.delay(0)
        assert not errors, errors[0]
        assert log.pipelined > 0, "no flush was split"
        assert fast.stored_ahead > log.pipelined, "no group gathered during a log PUT was stored ahead"
    rows = table_rows(storage, "t")
    check_log(rows, 3)
    check_acked(acked, rows)
    assert len(rows) == len(acked) == 4 * 12 * 30


def test_files_stored_ahead_for_a_commit_that_fails_stay_out_of_the_table(s3: S3Warehouse) -> None:
    """Request B arrives while A's commit stores its data file; B's file is stored during A's log PUT,
    then B's log entry is refused (403): B is not acknowledged, its file is in no entry, and the next
    request takes the offset after A's."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    config = BrokerConfig(linger_ms=0, object_linger_max_ms=0, maintenance_interval_ms=60_000)
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=1)
        log = broker.log("t")
        fast = log._fast
        assert isinstance(fast, ObjectAppender)
        produce_keyed(broker, ["warm-up"], acked)
        version = log.known_version()
        s3.proxy.record(True)
        s3.proxy.inject_errors(1, 403, "AccessDenied", op="PUT", path_contains=f"/{version + 2:020d}.json")
        s3.proxy.delay(0.3)
        a = threading.Thread(target=produce_keyed, args=(broker, ["a"], acked), daemon=True)
        a.start()
        time.sleep(0.15)  # A's data file is being stored
        with pytest.raises(TopiclakeError, match="403"):  # acks=all: the produce call fails
            broker.produce("t", [Record(key=b"b", value=b"b")])
        a.join(30)
        s3.proxy.delay(0)
        assert s3.proxy.counts().get("injected_errors") == 1, "B's log entry was not the one refused"
        assert fast.stored_ahead == 1, "B's commit did not use the file stored during A's log PUT"
        produce_keyed(broker, ["c"], acked)
        puts = {_name(path) for *_, path in s3.proxy.requests() if path.endswith(".parquet")}
    assert set(acked) == {"warm-up", "a", "c"}
    rows = table_rows(storage, "t")
    check_log(rows, 1)
    check_acked(acked, rows)
    assert sorted(r[0] for r in rows) == ["a", "c", "warm-up"]
    dt = DeltaTable(storage.topic_uri("t"), storage_options=storage.options())
    in_table = {_name(uri) for uri in dt.file_uris()}
    orphans = puts - in_table
    assert len(puts) == 3 and len(orphans) == 1, (puts, in_table)  # a's, b's (stored ahead) and c's
