"""Every job runs while a producer writes acks=all records through a live broker (its own maintenance on):
afterwards every acknowledged record is in the table exactly once, unless retention or key compaction
removed it by design; offsets are contiguous; the producer never saw an error. On a directory and on S3
(the local S3 server; there each job's commit is a put-if-absent log entry of topiclake's, not Delta
Spark's unconditional one: jobs/_commit.py). And a job whose commit loses against a concurrent one
retries it, saying why."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

import pytest
from _jobs_support import file_offsets, make_topic, segments, table_rows
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession

from topiclake.jobs import compact, compact_keys, reprocess, retention, vacuum
from topiclake.jobs._tables import new_tag, rewrite_segments
from topiclake.jobs.common import retry_conflicts
from topiclake.platform import Broker, BrokerConfig, LogLease, Record, Storage
from topiclake.sparkenv.s3a import spark_path

TOPIC = "live"
CONFIGS: dict[str, str | int] = {
    "cleanup.policy": "compact,delete",
    "segment.bytes": "800",  # a new segment every few requests
    "retention.bytes": "1",  # retention deletes every sealed segment it sees
}


class Producer(threading.Thread):
    """Produces batches of ``per_batch`` keyed records (7 keys) to alternating partitions with acks=all
    every 0.2 s until stopped, keeping what each acknowledgement said."""

    def __init__(self, broker: Broker, per_batch: int) -> None:
        super().__init__(name="producer", daemon=True)
        self.broker = broker
        self.per_batch = per_batch
        self.stop = threading.Event()
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self.keys: dict[bytes, bytes] = {}  # value -> key
        self.errors: list[BaseException] = []
        self.n = 0

    def run(self) -> None:
        while not self.stop.is_set():
            partition = self.n % 2
            records = [
                Record(key=f"k{(self.n + i) % 7}".encode(), value=f"v{self.n}-{i}".encode())
                for i in range(self.per_batch)
            ]
            try:
                results = self.broker.produce(TOPIC, records, partition=partition, acks="all")
            except Exception as exc:
                self.errors.append(exc)
                return
            for r, rec in zip(results, records, strict=True):
                if r.error is not None or r.offset is None:
                    self.errors.append(r.error or AssertionError("no offset"))
                    return
                assert rec.value is not None and rec.key is not None
                self.acked[(partition, r.offset)] = rec.value
                self.keys[rec.value] = rec.key
            self.n += 1
            time.sleep(0.2)


def job_commit(uri: str, job: str) -> dict[str, object]:
    """The newest commit of a job in a topic table's history (its ``userMetadata`` tag names the job)."""
    for commit in DeltaTable(uri).history(5000):  # on S3 many commits can follow a job's (seen: > 200)
        if str(commit.get("userMetadata", "")).startswith(f"topiclake:{job}:"):
            return commit
    raise AssertionError(f"no commit of {job} in {uri}")


@pytest.mark.parametrize("store", ["dir", "s3"])
def test_jobs_beside_a_live_producer_lose_and_duplicate_nothing(
    spark: SparkSession,
    warehouse: str,
    tmp_path: Path,
    store: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = str(tmp_path / "replay")
    configs = dict(CONFIGS)
    per_batch = 4
    if store == "s3":  # configured as users do: AWS_* in the environment (delta-rs, the jobs, S3A)
        warehouse, options = request.getfixturevalue("s3_warehouse")
        for key, value in options.items():
            monkeypatch.setenv(key, value)
        out = f"{warehouse}/replay"
        # fewer, larger segments: the local S3 server serves one request at a time, in Python; and larger
        # batches at the same pace, so that they fill as many segments as soon (4 took 34 s to seal 3)
        configs["segment.bytes"] = "4000"
        per_batch = 16
    make_topic(warehouse, TOPIC, partitions=2, configs=configs)
    storage = Storage(warehouse)
    config = BrokerConfig(
        maintenance=True,
        maintenance_interval_ms=1000,
        compact_min_files=4,
        log_retention_ms=2000,
        linger_ms=1,
    )
    broker = Broker(storage, config)
    producer = Producer(broker, per_batch)
    producer.start()
    common = {"warehouse": warehouse, "topics": (TOPIC,)}
    removed_by_keys = 0
    uri = storage.topic_uri(TOPIC)

    def held_log() -> contextlib.AbstractContextManager[object]:
        """On S3 the test holds the log whole from a job's start until it has found the job's commit in
        the history: the broker's 2-s log retention would otherwise clean the entry (or one before it, which
        fails delta-rs's history walk) under the look-up."""
        return LogLease(storage, TOPIC, holder="test-look-up") if store == "s3" else contextlib.nullcontext()

    def wait_for_sealed_segments(n: int) -> None:
        """Until every partition has n sealed segments (plus the active one) in the table."""
        deadline = time.monotonic() + 120
        while True:
            try:
                if min(len(segments(uri, p)) for p in range(2)) > n:
                    return
            except (DeltaError, OSError):
                pass  # the broker cleaned the log under our read: look again
            assert time.monotonic() < deadline and not producer.errors, "the producer is stuck"
            time.sleep(0.2)

    try:
        wait_for_sealed_segments(2)
        with held_log():
            res = compact.run(spark, compact.CompactConfig(**common, min_files=2))  # type: ignore[arg-type]
            if store == "s3":  # committed by topiclake's put-if-absent entry, not by Delta Spark
                assert str(job_commit(uri, "compact")["engineInfo"]).startswith("topiclake/")
        assert res.topics[0].records_removed == 0
        # the broker's own compaction is held by the job's rewrite lease: it cannot win race after race
        assert res.topics[0].retries <= 1
        with held_log():
            res = compact_keys.run(spark, compact_keys.CompactKeysConfig(**common))  # type: ignore[arg-type]
            if store == "s3":
                assert str(job_commit(uri, "compact-keys")["engineInfo"]).startswith("topiclake/")
        removed_by_keys = res.topics[0].records_removed
        wait_for_sealed_segments(1)
        with held_log():
            res = retention.run(
                spark,
                retention.RetentionConfig(**common, vacuum_retention_hours=1),  # type: ignore[arg-type]
            )
            if store == "s3":
                assert str(job_commit(uri, "retention")["operation"]) == "DELETE"
        starts = res.topics[0].log_start_offsets
        assert res.topics[0].records_removed > 0
        res = vacuum.run(spark, vacuum.VacuumConfig(**common, retention_hours=1))  # type: ignore[arg-type]
        replay = reprocess.ReprocessConfig(**common, job_id="live-1", to_table=out)  # type: ignore[arg-type]
        res = reprocess.run(spark, replay)
        replayed = res.topics[0].records_written
        assert reprocess.run(spark, replay).topics[0].skipped is not None
        time.sleep(1)
    finally:
        producer.stop.set()
        producer.join(30)
        broker.close()
    assert producer.errors == []
    assert producer.n > 20

    rows = table_rows(uri)  # asserts that no (partition, offset) is there twice
    latest: dict[tuple[int, bytes], int] = {}
    for (p, o), value in producer.acked.items():
        key = (p, producer.keys[value])
        latest[key] = max(latest.get(key, -1), o)
    for p in range(2):
        acked = sorted(o for q, o in producer.acked if q == p)
        assert acked == list(range(len(acked))), f"partition {p}: acknowledged offsets not contiguous"
        assert DeltaTable(uri).transaction_version(f"topiclake/hwm/{TOPIC}/{p}") == len(acked)
    assert set(rows) <= set(producer.acked), "the table holds a record nobody produced"
    missing_by_keys = 0
    for (p, o), value in producer.acked.items():
        if (p, o) in rows:
            assert rows[(p, o)][1] == value
        elif o >= starts[p]:
            # not retention's: key compaction removed it, so a newer record of its key exists
            assert latest[(p, producer.keys[value])] > o, (p, o)
            missing_by_keys += 1
    assert removed_by_keys > 0 and missing_by_keys <= removed_by_keys
    assert replayed is not None and replayed > 0
    assert spark.read.format("delta").load(spark_path(out)).count() == replayed


def test_a_commit_that_loses_a_conflict_is_retried(
    spark: SparkSession, warehouse: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A compaction rewrite whose scan is slowed down by a UDF loses against a delta-rs delete in the same
    segment committed meanwhile (a real Delta conflict); the retry reads again and commits."""
    topic = make_topic(
        warehouse, partitions=1, batches=[(0, [Record(key=b"k", value=b"v%d" % i)]) for i in range(4)]
    )
    uri = topic.uri
    marker = tmp_path / "scanning"

    def slow(offset: int) -> bool:
        from pathlib import Path

        Path(marker).touch()  # the rewrite's transaction has its snapshot and is scanning now
        time.sleep(1)
        return True

    spark.udf.register("tl_slow_true", slow, "boolean")
    attempts: list[int] = []

    def delete_meanwhile() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        DeltaTable(uri).delete("partition = 0 AND segment = 0 AND offset = 3")

    def compact_segment() -> None:
        attempts.append(1)
        racer = threading.Thread(target=delete_meanwhile) if len(attempts) == 1 else None
        if racer:
            racer.start()
        try:
            frame = spark.read.format("delta").load(uri).where("partition = 0 AND segment = 0")
            rewrite_segments(
                frame.where("tl_slow_true(offset)"),
                uri,
                {0: [0]},
                data_change=False,
                target_file_bytes=1 << 20,
                bytes_per_record=100.0,
                tag=new_tag("test"),
            )
        finally:
            if racer:
                racer.join()

    with caplog.at_level(logging.WARNING, logger="topiclake.jobs.common"):
        _, retries = retry_conflicts(compact_segment, topic="orders", what="test rewrite", base_delay_s=0.1)
    assert retries == 1 and len(attempts) == 2
    assert "test rewrite lost against a concurrent commit (" in caplog.text
    assert "io.delta.exceptions.Concurrent" in caplog.text and "retry 1/7" in caplog.text
    assert sorted(o for (_, o) in table_rows(uri)) == [0, 1, 2]
    assert [offs for _, _, offs in file_offsets(uri)] == [[0, 1, 2]]
