"""``spark.readStream.format("topiclake")``: exactly once across restarts from a checkpoint, read limits,
starting offsets, new partitions and topics, compaction/retention/key-compaction commits in between,
failOnDataLoss, and progress committed to a consumer group that the broker's lag sees."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.spark._options import parse_options
from topiclake.spark.datasource import kafka_schema
from topiclake.spark.source import TopiclakeStreamReader

BASE_TS = 1_700_000_000_000

# (topic, partition, offset) -> value
Produced = dict[tuple[str, int, int], bytes]


@dataclass
class Env:
    spark: SparkSession
    warehouse: str
    tmp: Path
    broker: Broker
    produced: Produced

    def produce(self, topic: str, partition: int, n: int, round_: int = 0) -> list[int]:
        records = [
            Record(
                key=f"k{i % 3}".encode(),
                value=f"{topic}/{partition}/{round_}/{i}".encode(),
                headers=[("round", str(round_).encode())],
                timestamp_ms=BASE_TS + 1000 * round_ + i,
            )
            for i in range(n)
        ]
        results = self.broker.produce(topic, records, partition=partition, acks="all")
        offsets = []
        for r, rec in zip(results, records, strict=True):
            assert r.error is None and r.offset is not None and rec.value is not None
            self.produced[(topic, partition, r.offset)] = rec.value
            offsets.append(r.offset)
        return offsets

    def run(self, name: str, expect_error: str | None = None, **options: str) -> list[int]:
        """One ``availableNow`` run into the Parquet sink ``<tmp>/<name>`` with its own checkpoint; returns
        the rows of each non-empty micro-batch."""
        reader = self.spark.readStream.format("topiclake").option("warehouse", self.warehouse)
        for k, v in options.items():
            reader = reader.option(k, v)
        query = None
        try:
            query = (
                reader.load()
                .writeStream.format("parquet")  # exactly once too (its metadata log); cheaper than Delta
                .option("checkpointLocation", str(self.tmp / f"{name}.ckpt"))
                .trigger(availableNow=True)
                .start(str(self.tmp / name))
            )
            finished = query.awaitTermination(180)
        except Exception as exc:
            if expect_error is None:
                raise
            assert expect_error in str(exc), str(exc)[:3000]
            return []
        finally:
            if query is not None:
                query.stop()
        assert finished, f"query {name} did not finish"
        assert expect_error is None, f"query {name} should have failed with {expect_error!r}"
        return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]

    def output(self, name: str) -> Produced:
        """What a run wrote, keyed like :data:`Produced`; a record written twice fails."""
        path = self.tmp / name
        if not list(path.glob("*.parquet")):
            return {}
        out: Produced = {}
        for r in self.spark.read.parquet(str(path)).collect():
            key = (r["topic"], r["partition"], r["offset"])
            assert key not in out, f"{key} written twice"
            out[key] = bytes(r["value"])
        return out


@pytest.fixture
def env(spark: SparkSession, warehouse: str, tmp_path: Path) -> Iterator[Env]:
    """A live broker (no background maintenance: the tests do compaction and retention themselves)."""
    broker = Broker(Storage(warehouse), BrokerConfig(linger_ms=1, maintenance=False))
    try:
        yield Env(spark, warehouse, tmp_path, broker, {})
    finally:
        broker.close()


def _of(produced: Produced, topic: str) -> Produced:
    return {k: v for k, v in produced.items() if k[0] == topic}


def test_exactly_once_across_restarts_with_limit_and_group_lag(env: Env) -> None:
    env.broker.create_topic("orders", 3)
    for p in range(3):
        env.produce("orders", p, 20)
    opts = {
        "subscribe": "orders",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "25",
        "groupId": "etl",
    }
    batches = env.run("out", **opts, includeHeaders="true")
    assert sum(batches) == 60 and max(batches) <= 25 and len(batches) >= 3, batches
    assert env.output("out") == env.produced
    out = env.spark.read.parquet(str(env.tmp / "out"))
    assert out.schema == kafka_schema(include_headers=True)
    assert {r["h"] for r in out.select(F.col("headers")[0]["value"].alias("h")).collect()} == {b"0"}

    lag = env.broker.groups.lag("etl")  # the running broker sees what the Spark query committed
    assert {(r.topic, r.partition): (r.committed_offset, r.lag) for r in lag} == {
        ("orders", p): (20, 0) for p in range(3)
    }

    for p in range(3):
        env.produce("orders", p, 5, round_=1)
    assert sum(env.run("out", **opts, includeHeaders="true")) == 15  # the restart reads only what is new
    assert env.output("out") == env.produced
    assert {r.partition: r.committed_offset for r in env.broker.groups.lag("etl")} == {0: 25, 1: 25, 2: 25}
    assert env.run("out", **opts, includeHeaders="true") == []  # nothing new: no batch at all


def test_starting_offsets_latest_json_and_timestamp(env: Env) -> None:
    env.broker.create_topic("t", 2)
    for p in range(2):
        env.produce("t", p, 10)
    assert env.run("latest", subscribe="t") == []  # latest is the default for streams
    env.produce("t", 0, 4, round_=1)
    assert sum(env.run("latest", subscribe="t")) == 4
    assert set(env.output("latest")) == {("t", 0, o) for o in range(10, 14)}

    env.run("json", subscribe="t", startingOffsets='{"t": {"0": 12, "1": -2}}')
    assert set(env.output("json")) == {("t", 0, o) for o in (12, 13)} | {("t", 1, o) for o in range(10)}

    # round 1 is only in partition 0; partition 1 has nothing that late and starts at its end
    env.run(
        "ts",
        subscribe="t",
        startingTimestamp=str(BASE_TS + 1000),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert set(env.output("ts")) == {("t", 0, o) for o in range(10, 14)}
    by_ts = f'{{"t": {{"0": {BASE_TS + 1002}, "1": {BASE_TS + 7}}}}}'
    env.run("by_ts", subscribe="t", startingOffsetsByTimestamp=by_ts)
    assert set(env.output("by_ts")) == {("t", 0, o) for o in (12, 13)} | {("t", 1, o) for o in (7, 8, 9)}


def test_pattern_picks_up_new_topics_and_partitions_and_assign(env: Env) -> None:
    env.broker.create_topic("ev-a", 1)
    env.broker.create_topic("other", 1)
    env.produce("ev-a", 0, 6)
    env.produce("other", 0, 3)
    opts = {"subscribePattern": "ev-.*", "startingOffsets": "earliest"}
    assert sum(env.run("pat", **opts)) == 6
    env.broker.increase_partitions("ev-a", 2)
    env.broker.create_topic("ev-b", 2)
    env.produce("ev-a", 0, 2, round_=1)
    env.produce("ev-a", 1, 3, round_=1)
    env.produce("ev-b", 1, 4, round_=1)
    env.produce("other", 0, 3, round_=1)
    assert sum(env.run("pat", **opts)) == 9
    assert env.output("pat") == {k: v for k, v in env.produced.items() if k[0].startswith("ev-")}

    env.run("assigned", assign='{"ev-a": [1], "ev-b": [1]}', startingOffsets="earliest")
    assert set(env.output("assigned")) == {("ev-a", 1, o) for o in range(3)} | {
        ("ev-b", 1, o) for o in range(4)
    }


def _segments(uri: str, partition: int) -> list[int]:
    rows = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
    return sorted({int(r["partition.segment"]) for r in rows if int(r["partition.partition"]) == partition})


def test_compaction_retention_and_key_compaction_in_between(env: Env) -> None:
    # ~150 bytes per produce call of 3 records: a 200-byte segment is sealed after two calls
    env.broker.create_topic("log", 2, configs={"segment.bytes": "200", "retention.ms": "-1"})
    uri = Storage(env.warehouse).topic_uri("log")
    for round_ in range(4):
        for p in range(2):
            env.produce("log", p, 3, round_=round_)
    assert _segments(uri, 0) == [0, 6]
    opts = {"subscribe": "log", "startingOffsets": "earliest"}
    assert sum(env.run("out", **opts)) == 24

    for round_ in range(4, 8):
        for p in range(2):
            env.produce("log", p, 3, round_=round_)
    assert _segments(uri, 0) == [0, 6, 12, 18]
    # compaction rewrites files, retention drops partition 0's oldest segment, already read; key compaction
    # deletes unread records 13 and 14 of partition 1; VACUUM removes the files (delta-rs does what the
    # jobs do, in a fraction of Spark SQL's time here)
    table = DeltaTable(uri)
    table.optimize.compact()
    table.delete('"partition" = 0 AND segment = 0')
    table.delete('"partition" = 1 AND "offset" IN (13, 14)')
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert _segments(uri, 1) == [0, 6, 12, 18]  # the gap is inside segment 12: not data loss

    assert sum(env.run("out", **opts)) == 22
    expected = {k: v for k, v in env.produced.items() if k[:2] != ("log", 1) or k[2] not in (13, 14)}
    assert env.output("out") == expected
    for p in range(2):  # the broker keeps appending after all that
        env.produce("log", p, 1, round_=9)
    assert sum(env.run("out", **opts)) == 2


def test_fail_on_data_loss(env: Env) -> None:
    env.broker.create_topic("loss", 1, configs={"segment.bytes": "200", "retention.ms": "-1"})
    uri = Storage(env.warehouse).topic_uri("loss")
    for round_ in range(2):
        env.produce("loss", 0, 3, round_=round_)
    assert sum(env.run("out", subscribe="loss", startingOffsets="earliest")) == 6
    for round_ in range(2, 6):
        env.produce("loss", 0, 3, round_=round_)
    assert _segments(uri, 0) == [0, 6, 12]
    # retention deletes the two oldest segments: unread records 6..11 are gone
    DeltaTable(uri).delete('"partition" = 0 AND segment IN (0, 6)')

    env.run(
        "out", expect_error="records of loss-0 at offsets [6, 12) were deleted by retention", subscribe="loss"
    )
    assert set(env.output("out")) == {("loss", 0, o) for o in range(6)}
    # the same checkpoint goes on with failOnDataLoss=false, from the new log start
    assert sum(env.run("out", subscribe="loss", failOnDataLoss="false")) == 6
    assert set(env.output("out")) == {("loss", 0, o) for o in [*range(6), *range(12, 18)]}
    env.run("strict", expect_error="failOnDataLoss", subscribe="loss", startingOffsets='{"loss": {"0": 0}}')


def test_bad_stream_options_fail_clearly(env: Env) -> None:
    env.broker.create_topic("t", 1)
    env.run("e1", expect_error="not valid in streaming queries", subscribe="t", endingOffsets="latest")
    env.run("e2", expect_error="must give every partition", subscribe="t", startingOffsets='{"t": {"1": 0}}')
    env.run("e3", expect_error="only one of the options", subscribe="t", subscribePattern="t.*")


def test_read_limits_and_available_now_without_spark(warehouse: str) -> None:
    """The driver side alone: what ``latestOffset`` answers under each read limit and trigger."""
    with Broker(Storage(warehouse), BrokerConfig(linger_ms=1, maintenance=False)) as broker:
        broker.create_topic("t", 2)
        for p in range(2):
            broker.produce("t", [Record(value=b"v%d" % i) for i in range(10)], partition=p)
        options = {"warehouse": warehouse, "subscribe": "t", "startingOffsets": "earliest"}
        limits = {"maxOffsetsPerTrigger": "8", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "1h"}
        reader = TopiclakeStreamReader(parse_options({**options, **limits}, streaming=True))
        start = reader.initialOffset()
        assert start == {"t": {"0": 0, "1": 0}}
        assert reader.getDefaultReadLimit() == ReadMaxRows(8)
        assert reader.latestOffset(start, ReadMaxRows(8)) == {"t": {"0": 4, "1": 4}}
        assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 10, "1": 10}}  # Trigger.Once
        assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 10}}
        short = {"t": {"0": 10, "1": 8}}
        assert reader.latestOffset(short, ReadMaxRows(8)) == short  # 2 < minOffsetsPerTrigger: wait
        eager = TopiclakeStreamReader(
            parse_options({**options, **limits, "maxTriggerDelay": "0s"}, streaming=True)
        )
        assert eager.latestOffset(short, ReadMaxRows(8)) == {"t": {"0": 10, "1": 10}}  # waited long enough

        reader.prepareForTriggerAvailableNow()
        broker.produce("t", [Record(value=b"late")], partition=1)
        # availableNow: up to the ends when it started, no minimum (it must finish)
        assert reader.latestOffset(short, ReadMaxRows(8)) == {"t": {"0": 10, "1": 10}}
        ranges = reader.partitions(short, {"t": {"0": 10, "1": 10}})
        assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [("t", 1, 8, 10)]  # type: ignore[attr-defined]
        got = pa.Table.from_batches(list(pickle.loads(pickle.dumps(reader)).read(ranges[0])))
        assert got["value"].to_pylist() == [b"v8", b"v9"]
        assert pickle.loads(pickle.dumps(reader))._state is None  # the driver's state never travels
        reader.stop()
        eager.stop()


def test_processing_time_trigger_beside_a_broker_compacting_and_cleaning(
    spark: SparkSession, warehouse: str
) -> None:
    """A running query (processingTime trigger, memory sink) while the broker produces, compacts, cleans
    its Delta log and vacuums at full speed."""
    config = BrokerConfig(
        linger_ms=1,
        maintenance_interval_ms=50,
        compact_min_files=3,
        checkpoint_interval=2,
        log_retention_ms=2000,  # shorter windows break the broker's own commits (reported)
        vacuum_interval_ms=1000,
        vacuum_retention_hours=0,
    )
    produced: Produced = {}
    with Broker(Storage(warehouse), config) as broker:
        broker.create_topic("live", 3)
        query = (
            spark.readStream.format("topiclake")
            .option("warehouse", warehouse)
            .option("subscribe", "live")
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("memory")
            .queryName("live_sink")
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            for round_ in range(60):
                for p in range(3):
                    for r in broker.produce("live", [Record(value=b"%d/%d" % (round_, p))], partition=p):
                        assert r.offset is not None
                        produced[("live", p, r.offset)] = b"%d/%d" % (round_, p)
                time.sleep(0.05)
            query.processAllAvailable()
            rows = spark.sql("SELECT topic, partition, offset, value FROM live_sink").collect()
        finally:
            query.stop()
        stats = broker.log("live").maintainer.stats
    got = {(r["topic"], r["partition"], r["offset"]): bytes(r["value"]) for r in rows}
    assert len(got) == len(rows), "a record was read twice"
    assert got == produced
    assert stats.compactions > 0 and stats.checkpoints > 0, stats
    log = Path(Storage(warehouse).topic_uri("live")) / "_delta_log"
    assert not (log / f"{0:020d}.json").exists(), "the broker cleaned no log entry while the query ran"
