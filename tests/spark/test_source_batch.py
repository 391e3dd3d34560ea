"""``spark.read.format("topiclake")``: the Kafka source's schema and options over a topic table, read by
offset range, compared record by record with what the broker acknowledged."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from topiclake.errors import DataLoss, InvalidRequest
from topiclake.jobs.session import WAREHOUSE_CONF
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.spark import register
from topiclake.spark._options import offsets_from_json, offsets_to_json, parse_options
from topiclake.spark._ranges import Warehouse, output_schema
from topiclake.spark._tasks import plan_ranges, read_range
from topiclake.spark.datasource import kafka_schema
from topiclake.spark.source import current_partitions, rate_limit

TOPIC = "orders"
PARTITIONS = 3
ROUNDS = 6
PER_ROUND = 4
BASE_TS = 1_700_000_000_000
# ~214 bytes per round: a segment is sealed after two rounds, so partitions have segments 0, 8, 16.
SEGMENT_BYTES = "300"

# (topic, partition, offset) -> (key, value, headers, timestamp ms)
Produced = dict[tuple[str, int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]


@dataclass
class Topic:
    warehouse: str
    uri: str
    produced: Produced


def produce(broker: Broker, produced: Produced, topic: str, round_: int, partitions: int, n: int) -> None:
    """One request per partition with keys, headers (some null) and CreateTime timestamps; remember them."""
    for p in range(partitions):
        records = [
            Record(
                key=None if i == 1 else f"k{p}-{round_}-{i}".encode(),
                value=f"{topic} {p}/{round_}/{i}".encode(),
                headers=[("h", f"x{i}".encode()), ("n", None)] if i != 2 else None,
                timestamp_ms=BASE_TS + 1000 * round_ + i,
            )
            for i in range(n)
        ]
        results = broker.produce(topic, records, partition=p, acks="all")
        for r, rec in zip(results, records, strict=True):
            assert r.error is None and r.offset is not None
            assert rec.timestamp_ms is not None
            produced[(topic, p, r.offset)] = (rec.key, rec.value, list(rec.headers or []), rec.timestamp_ms)


@pytest.fixture
def topic(warehouse: str) -> Iterator[Topic]:
    """3 partitions of 24 records in segments 0, 8 and 16 (two files each), written by a closed broker."""
    produced: Produced = {}
    with Broker(Storage(warehouse), BrokerConfig(linger_ms=1, maintenance=False)) as broker:
        broker.create_topic(TOPIC, PARTITIONS, configs={"retention.ms": "-1", "segment.bytes": SEGMENT_BYTES})
        for round_ in range(ROUNDS):
            produce(broker, produced, TOPIC, round_, PARTITIONS, PER_ROUND)
    uri = Storage(warehouse).topic_uri(TOPIC)
    segments = {
        int(s)
        for s in pa.table(DeltaTable(uri).get_add_actions(flatten=True))["partition.segment"].to_pylist()
    }
    assert segments == {0, 8, 16}
    yield Topic(warehouse, uri, produced)


def read(spark: SparkSession, warehouse: str, **options: str) -> DataFrame:
    reader = spark.read.format("topiclake").option("warehouse", warehouse)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def as_produced(df: DataFrame) -> Produced:
    """Rows keyed like :data:`Produced`; duplicates fail."""
    rows = df.withColumn("ts_ms", F.unix_millis("timestamp")).collect()
    out: Produced = {}
    for r in rows:
        key = (r["topic"], r["partition"], r["offset"])
        assert key not in out, f"duplicate {key}"
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or []]
        out[key] = (
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            headers,
            r["ts_ms"],
        )
    return out


def offsets(df: DataFrame) -> set[tuple[int, int]]:
    return {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}


def test_batch_read_is_the_broker_data_with_kafka_schema(spark: SparkSession, topic: Topic) -> None:
    df = read(spark, topic.warehouse, subscribe=TOPIC, includeHeaders="true")
    assert df.schema == kafka_schema(include_headers=True)
    assert df.schema.fieldNames() == ["key", "value", "topic", "partition", "offset", "timestamp",
                                      "timestampType", "headers"]  # fmt: skip
    assert as_produced(df) == topic.produced
    assert {r["timestampType"] for r in df.select("timestampType").collect()} == {0}

    plain = read(spark, topic.warehouse, subscribe=TOPIC)
    assert plain.schema == kafka_schema(include_headers=False)
    assert plain.count() == len(topic.produced)
    # records of a partition come in offset order within each task
    part1 = [r["offset"] for r in plain.where("partition = 1").collect()]
    assert part1 == sorted(part1) == list(range(ROUNDS * PER_ROUND))


def test_default_warehouse_comes_from_the_session_conf(spark: SparkSession, topic: Topic) -> None:
    spark.conf.set(WAREHOUSE_CONF, topic.warehouse)
    try:
        register(spark)
        df = spark.read.format("topiclake").option("subscribe", TOPIC).load()
        assert df.count() == len(topic.produced)
    finally:
        spark.conf.unset(WAREHOUSE_CONF)
        register(spark)
    with pytest.raises(Exception, match="no warehouse"):
        spark.read.format("topiclake").option("subscribe", TOPIC).load().collect()


def test_offset_bounds_timestamps_assign_and_pattern(spark: SparkSession, topic: Topic) -> None:
    wh = topic.warehouse
    df = read(
        spark,
        wh,
        subscribe=TOPIC,
        startingOffsets='{"orders": {"0": 5, "1": -2, "2": 20}}',
        endingOffsets='{"orders": {"0": 9, "1": 3, "2": -1}}',
    )
    assert offsets(df) == {(0, o) for o in range(5, 9)} | {(1, o) for o in range(3)} | {
        (2, o) for o in range(20, 24)
    }

    # round 3 starts at BASE_TS + 3000: offsets 12.. of every partition; it ends before round 5
    df = read(spark, wh, subscribe=TOPIC, startingTimestamp=str(BASE_TS + 3000),
              endingOffsetsByTimestamp=f'{{"orders": {{"0": {BASE_TS + 5000}, "1": {BASE_TS + 4000}, '
                                       f'"2": {BASE_TS + 99000}}}}}')  # fmt: skip
    assert offsets(df) == {(0, o) for o in range(12, 20)} | {(1, o) for o in range(12, 16)} | {
        (2, o) for o in range(12, 24)
    }

    df = read(spark, wh, assign='{"orders": [2]}', endingOffsets="latest")
    assert offsets(df) == {(2, o) for o in range(24)}

    with Broker(Storage(wh), BrokerConfig(linger_ms=1, maintenance=False)) as broker:
        broker.create_topic("orders-eu", 1)
        broker.create_topic("returns", 1)
        produce(broker, topic.produced, "orders-eu", 0, 1, 3)
        produce(broker, topic.produced, "returns", 0, 1, 2)
    got = as_produced(read(spark, wh, subscribePattern="orders.*", includeHeaders="true"))
    assert got == {k: v for k, v in topic.produced.items() if k[0] != "returns"}


def test_large_ranges_split_into_tasks(spark: SparkSession, topic: Topic) -> None:
    df = read(spark, topic.warehouse, subscribe=TOPIC, maxRecordsPerPartition="5")
    assert df.rdd.getNumPartitions() == PARTITIONS * 5  # 24 offsets per partition in ranges of 5
    assert offsets(df) == {(p, o) for _, p, o in topic.produced}
    df = read(spark, topic.warehouse, assign='{"orders": [0]}', minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    assert df.count() == ROUNDS * PER_ROUND


def test_compaction_retention_and_data_loss(spark: SparkSession, topic: Topic) -> None:
    # delta-rs does what compaction, retention and VACUUM jobs do (and much faster than Spark SQL here)
    table = DeltaTable(topic.uri)
    files_before = len(table.file_uris())
    table.optimize.compact()
    table.delete('"partition" = 1 AND segment = 0')
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(DeltaTable(topic.uri).file_uris()) < files_before
    surviving = {k: v for k, v in topic.produced.items() if not (k[1] == 1 and k[2] < 8)}
    wh = topic.warehouse

    # earliest is the new log start: nothing was lost
    assert as_produced(read(spark, wh, subscribe=TOPIC, includeHeaders="true")) == surviving

    from_zero = '{"orders": {"0": 0, "1": 0, "2": 0}}'
    with pytest.raises(Exception, match=r"orders-1 at offsets \[0, 8\) were deleted by retention") as err:
        read(spark, wh, subscribe=TOPIC, startingOffsets=from_zero).collect()
    assert "failOnDataLoss" in str(err.value)
    got = read(
        spark, wh, subscribe=TOPIC, startingOffsets=from_zero, failOnDataLoss="false", includeHeaders="true"
    )
    assert as_produced(got) == surviving

    # key compaction leaves gaps inside a segment: not data loss, the rest is read
    DeltaTable(topic.uri).delete('"partition" = 2 AND "offset" IN (0, 3, 9, 10)')
    got = read(spark, wh, subscribe=TOPIC, startingOffsets=from_zero.replace('"1": 0', '"1": 8'))
    assert offsets(got) == {(p, o) for _, p, o in surviving} - {(2, 0), (2, 3), (2, 9), (2, 10)}


def test_bad_options_fail_clearly(spark: SparkSession, topic: Topic) -> None:
    wh = topic.warehouse
    # through Spark: what needs the warehouse to check (the rest is checked without Spark below)
    cases: list[tuple[dict[str, str], str]] = [
        ({}, "one of the options 'subscribe', 'subscribePattern' or 'assign' must be given"),
        ({"subscribe": TOPIC, "startingOffsets": "latest"}, "can't be latest for batch queries"),
        ({"subscribe": TOPIC, "startingOffsets": '{"orders": {"0": 0}}'}, r"no entry for orders-1, orders-2"),
        ({"subscribe": "nope"}, "topic 'nope' does not exist"),
        ({"assign": '{"orders": [7]}'}, "topic orders has no partition 7"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            read(spark, wh, **options).collect()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("topiclake").schema("value string").option("warehouse", wh).option(
            "subscribe", TOPIC
        ).load().collect()
    with pytest.raises(Exception, match="no topiclake warehouse"):
        read(spark, wh + "/nothing-here", subscribe=TOPIC).collect()


def test_task_relists_files_compacted_or_deleted_after_planning(topic: Topic) -> None:
    """An executor whose planned files were compacted and vacuumed away reads the new files instead; one
    whose unread records were deleted by retention meanwhile reports the loss."""
    opts = parse_options({"warehouse": topic.warehouse, "subscribe": TOPIC}, streaming=False)
    wh = Warehouse(opts)
    snaps, tps = current_partitions(opts, wh)
    starts = {tp: 0 for tp in tps}
    ends = {tp: snaps[TOPIC].end(tp[1]) for tp in tps}
    tasks = plan_ranges(opts, snaps, starts, ends)
    assert [t.partition for t in tasks] == [0, 1, 2] and all(len(t.files) == 6 for t in tasks)
    table = DeltaTable(topic.uri)
    table.optimize.compact()
    table.delete('"partition" = 1 AND segment = 0')
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)

    got = pa.Table.from_batches(list(read_range(tasks[0])))
    assert got.schema == output_schema(include_headers=False)
    assert got["offset"].to_pylist() == list(range(ROUNDS * PER_ROUND))
    assert got["value"].to_pylist() == [topic.produced[(TOPIC, 0, o)][1] for o in range(ROUNDS * PER_ROUND)]
    with pytest.raises(DataLoss, match=r"orders-1 at offsets \[0, 8\) were deleted by retention"):
        list(read_range(tasks[1]))
    lossy = copy.copy(tasks[1])
    lossy.fail_on_data_loss = False
    assert pa.Table.from_batches(list(read_range(lossy)))["offset"].to_pylist() == list(range(8, 24))


# ------------------------------------------------------------------------- pure option parsing (no Spark)


def test_option_parsing_follows_the_kafka_source() -> None:
    opts = parse_options(
        {"SUBSCRIBE": "a, b,a", "startingoffsets": "earliest", "maxOffsetsPerTrigger": "10",
         "maxTriggerDelay": "30s", "storage.AWS_REGION": "eu", "kafka.bootstrap.servers": "ignored:9092"},
        streaming=True,
        default_warehouse="/wh",
    )  # fmt: skip
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.kind == "earliest" and opts.ending.kind == "latest"
    assert (opts.max_offsets_per_trigger, opts.max_trigger_delay_ms) == (10, 30_000)
    assert opts.storage_options == {"AWS_REGION": "eu"} and opts.warehouse == "/wh"
    assert opts.fail_on_data_loss and not opts.include_headers
    assert parse_options({"subscribe": "a", "warehouse": "/x"}, streaming=True).starting.kind == "latest"
    assert parse_options({"subscribe": "a", "warehouse": "/x"}, streaming=False).starting.kind == "earliest"
    errors = [
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "not valid in streaming queries"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "positive integer"),
        (
            {"subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"},
            True,
            "must not exceed",
        ),
        ({"subscribePattern": "("}, True, "not a valid regular expression"),
        ({"assign": '{"a": ["x"]}'}, True, "option 'assign' must be JSON like"),
        ({"subscribe": " , "}, True, "no topics to subscribe to"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, True, "offsets must be >= 0"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, True, "timestamp in milliseconds"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, False, "not valid for batch queries"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, True, "must be a duration"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, False, "only one of the options"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, False, "can't be earliest for batch queries"),
        ({"subscribe": "a", "startingOffsets": "{nope"}, False, "option 'startingOffsets' is not valid JSON"),
        (
            {"subscribe": "a", "failOnDataLoss": "maybe"},
            False,
            "option 'failOnDataLoss' must be true or false",
        ),
        ({"subscribe": "bad/name"}, False, "invalid topic name"),
        ({"subscribe": "a", "groupId": ""}, True, "option 'groupId' must be 1 to 255"),
    ]
    for options, streaming, message in errors:
        with pytest.raises(InvalidRequest, match=message):
            parse_options({"warehouse": "/wh", **options}, streaming=streaming)
    with pytest.raises(InvalidRequest, match="no warehouse"):
        parse_options({"subscribe": "a"}, streaming=True)


def test_offsets_json_and_rate_limit() -> None:
    offsets_map = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    as_json = offsets_to_json(offsets_map)
    assert list(as_json) == ["a", "b"] and list(as_json["b"]) == ["2", "10"]  # Spark compares the text
    assert offsets_from_json(as_json) == offsets_map
    starts = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    ends = {("t", 0): 100, ("t", 1): 10, ("t", 2): 6}
    limited = rate_limit(25, starts, ends)
    assert sum(limited[tp] - starts[tp] for tp in starts) == 25
    assert limited[("t", 1)] == 10 and limited[("t", 2)] <= 6
    assert rate_limit(1000, starts, ends) == ends
