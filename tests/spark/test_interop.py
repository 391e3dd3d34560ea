"""Interop both ways: what the core writes Spark reads as a Kafka source, and after Spark's maintenance
(OPTIMIZE, a segment DELETE, VACUUM) the core still appends, keeps offsets, and reads every surviving record.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from topiclake.platform import Broker, BrokerConfig, Record
from topiclake.platform.storage import Storage
from topiclake.schemas import (
    CREATE_TIME,
    KAFKA_COLUMNS,
    KAFKA_SOURCE_DDL,
    PARTITION_COLUMNS,
    TOPIC_SCHEMA,
    TOPIC_TABLE_PROPERTIES,
)

TOPIC = "orders"
PARTITIONS = 3
ROUNDS = 6  # produce calls (one Delta commit, one file) per partition
PER_ROUND = 4
# A round's input is ~214 bytes (Arrow), so a segment of 300 bytes is sealed after two rounds: every
# partition gets segments 0, 8, 16 of two files each, which OPTIMIZE merges into one.
SEGMENT_BYTES = "300"
SEGMENTS = [0, 8, 16]
BASE_TS = 1_700_000_000_000

#: Delta features a table must not get if delta-rs is to keep writing it.
DELTA_RS_UNWRITABLE = {
    "deletionVectors",
    "columnMapping",
    "identityColumns",
    "rowTracking",
    "domainMetadata",
    "v2Checkpoint",
    "typeWidening",
    "inCommitTimestamp",
}

# (partition, offset) -> (key, value, headers, timestamp_ms)
Produced = dict[tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]


@dataclass
class Topic:
    storage: Storage
    uri: str
    produced: Produced


def _records(partition: int, round_: int, n: int) -> list[Record]:
    records = []
    for i in range(n):
        headers: list[tuple[str, bytes | None]] = [("h", f"x{i}".encode()), ("null", None)]
        records.append(
            Record(
                key=None if i == 1 else f"k{partition}-{round_}-{i}".encode(),
                value=f"value {partition}/{round_}/{i}".encode(),
                headers=headers if i != 2 else None,
                timestamp_ms=BASE_TS + 1000 * round_ + i,
            )
        )
    return records


def _produce(broker: Broker, produced: Produced, round_: int, n: int = PER_ROUND) -> dict[int, list[int]]:
    """Produce one request per partition; record what was acknowledged; return offsets by partition."""
    offsets: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        records = _records(p, round_, n)
        results = broker.produce(TOPIC, records, partition=p, acks="all")
        assert [r.error for r in results] == [None] * n
        assert {r.partition for r in results} == {p}
        offsets[p] = [r.offset for r in results if r.offset is not None]
        assert len(offsets[p]) == n
        for r, rec in zip(results, records, strict=True):
            assert r.offset is not None
            assert rec.timestamp_ms is not None
            produced[(p, r.offset)] = (rec.key, rec.value, list(rec.headers or []), rec.timestamp_ms)
    return offsets


def _fetch_all(broker: Broker, partition: int) -> tuple[list[dict[str, object]], int, int]:
    """Every record the core serves for a partition, from its log start: (rows, log start, end)."""
    start = broker.list_offsets(TOPIC, partition, "earliest")
    end = broker.list_offsets(TOPIC, partition, "latest")
    assert start is not None and end is not None
    rows: list[dict[str, object]] = []
    offset = start
    while offset < end:
        result = broker.fetch(TOPIC, partition=partition, offset=offset, max_records=1000)
        assert result.records.num_rows > 0, f"fetch at {offset} < end {end} returned nothing"
        assert result.records.schema == TOPIC_SCHEMA
        rows.extend(result.records.to_pylist())
        offset = result.next_offset
    return rows, start, end


def _as_produced(row: dict[str, object]) -> tuple[object, object, list[tuple[object, object]], int]:
    headers = row["headers"] or []
    assert isinstance(headers, list)
    ts = row["timestamp"]
    assert hasattr(ts, "timestamp")
    return (
        row["key"],
        row["value"],
        [(h["key"], h["value"]) for h in headers],
        round(ts.timestamp() * 1000),
    )


def _assert_delta_rs_writable(uri: str) -> None:
    table = DeltaTable(uri)
    protocol = table.protocol()
    features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
    assert protocol.min_reader_version == 1, protocol
    assert protocol.min_writer_version == 2, protocol
    assert not features & DELTA_RS_UNWRITABLE, protocol
    conf = table.metadata().configuration
    assert conf.get("delta.enableDeletionVectors") != "true", conf
    for key, value in TOPIC_TABLE_PROPERTIES.items():
        assert conf.get(key) == value, (key, conf)


def _files(uri: str) -> list[str]:
    return [str(p) for p in pa.table(DeltaTable(uri).get_add_actions()).column("path").to_pylist()]


def _segments(uri: str, partition: int) -> list[int]:
    files = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
    return sorted({int(f["partition.segment"]) for f in files if int(f["partition.partition"]) == partition})


def _last_operation(spark: SparkSession, uri: str) -> tuple[str, dict[str, str]]:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]
    return row["operation"], dict(row["operationMetrics"] or {})


@pytest.fixture
def topic(warehouse: str) -> Iterator[Topic]:
    """A topic with 3 partitions of 3 segments of 2 files each, produced by a broker that is then closed."""
    storage = Storage(warehouse)
    produced: Produced = {}
    broker = Broker(storage, BrokerConfig(linger_ms=2))
    try:
        broker.create_topic(
            TOPIC, partitions=PARTITIONS, configs={"retention.ms": "-1", "segment.bytes": SEGMENT_BYTES}
        )
        for round_ in range(ROUNDS):
            _produce(broker, produced, round_)
    finally:
        broker.close()
    uri = storage.topic_uri(TOPIC)
    for p in range(PARTITIONS):
        assert _segments(uri, p) == SEGMENTS, p
    assert len(_files(uri)) == PARTITIONS * ROUNDS
    yield Topic(storage, uri, produced)


# ---------------------------------------------------------------------------- (a) Spark reads the core


def test_spark_reads_topic_as_kafka_source(spark: SparkSession, topic: Topic) -> None:
    df = spark.read.format("delta").load(topic.uri).select(*KAFKA_COLUMNS)

    expected = StructType.fromDDL(KAFKA_SOURCE_DDL)
    assert isinstance(expected, StructType)
    assert df.schema.fieldNames() == expected.fieldNames() == list(KAFKA_COLUMNS)
    for got, want in zip(df.schema.fields, expected.fields, strict=True):
        assert got.dataType == want.dataType, got.name
        assert got.nullable and want.nullable, got.name
    # nested nullability too: array elements and both header fields may be null, as in the Kafka source
    headers_type = df.schema["headers"].dataType
    assert isinstance(headers_type, ArrayType) and headers_type.containsNull
    assert isinstance(headers_type.elementType, StructType)
    assert all(f.nullable for f in headers_type.elementType.fields)

    rows = df.withColumn("ts_ms", F.unix_millis("timestamp")).collect()
    assert {r["topic"] for r in rows} == {TOPIC}
    assert {r["timestampType"] for r in rows} == {CREATE_TIME}
    by_partition: dict[int, list[int]] = {}
    seen: Produced = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or []]
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        seen[(r["partition"], r["offset"])] = (key, value, headers, r["ts_ms"])
    for p in range(PARTITIONS):
        assert sorted(by_partition[p]) == list(range(ROUNDS * PER_ROUND)), p
    assert seen == topic.produced


def test_spark_reads_only_committed_records_in_offset_order(spark: SparkSession, topic: Topic) -> None:
    rows = (
        spark.read.format("delta")
        .load(topic.uri)
        .where(F.col("partition") == 1)
        .orderBy("offset")
        .select("offset", "value")
        .collect()
    )
    expected = sorted((o, v) for (p, o), (_, v, _, _) in topic.produced.items() if p == 1)
    assert [(r["offset"], bytes(r["value"])) for r in rows] == expected


# ---------------------------------------------------------------------------- (b) the core after Spark


def _spark_optimize(spark: SparkSession, uri: str) -> None:
    files_before = len(_files(uri))
    spark.sql(f"OPTIMIZE delta.`{uri}`").collect()
    operation, _ = _last_operation(spark, uri)
    assert operation == "OPTIMIZE"
    # one file per (partition, segment) afterwards
    assert len(_files(uri)) == PARTITIONS * len(SEGMENTS) < files_before


def _spark_delete_oldest_segment(spark: SparkSession, uri: str, partition: int) -> frozenset[tuple[int, int]]:
    """Delete the partition's oldest segment as retention would; return the (partition, offset) pairs gone."""
    oldest, following = _segments(uri, partition)[:2]
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE `partition` = {partition} AND segment = {oldest}").collect()
    operation, metrics = _last_operation(spark, uri)
    assert operation == "DELETE"
    # a whole (partition, segment) pair is a metadata-only delete: files removed, none rewritten
    assert metrics.get("numAddedFiles", "0") == "0", metrics
    assert _segments(uri, partition) == SEGMENTS[1:]
    return frozenset((partition, o) for o in range(oldest, following))


def _spark_vacuum(spark: SparkSession, uri: str) -> None:
    spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS").collect()
    operation, _ = _last_operation(spark, uri)
    assert operation == "VACUUM END"
    on_disk = {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts}
    assert on_disk == set(_files(uri)), "VACUUM left unreferenced files or removed live ones"


def _check_core_after_spark(topic: Topic, deleted: frozenset[tuple[int, int]] = frozenset()) -> None:
    """A new broker continues every partition's offsets and serves every surviving record."""
    end_before = {p: 1 + max(o for q, o in topic.produced if q == p) for p in range(PARTITIONS)}
    # A Spark job that runs beside a live broker reads Delta log entries from its read version on; the
    # broker's log window must outlast the job (docs/decisions.md: reader leases will lift this).
    broker = Broker(topic.storage, BrokerConfig(linger_ms=2, log_retention_ms=600_000))
    try:
        for p in range(PARTITIONS):
            assert broker.list_offsets(TOPIC, p, "latest") == end_before[p], p
        offsets = _produce(broker, topic.produced, ROUNDS)
        for p in range(PARTITIONS):
            assert offsets[p] == list(range(end_before[p], end_before[p] + PER_ROUND)), p

        for p in range(PARTITIONS):
            rows, start, end = _fetch_all(broker, p)
            gone = sorted(o for q, o in deleted if q == p)
            expected_start = gone[-1] + 1 if gone else 0
            assert (start, end) == (expected_start, end_before[p] + PER_ROUND), p
            assert [r["offset"] for r in rows] == list(range(start, end)), p
            assert all(r["partition"] == p and r["topic"] == TOPIC for r in rows)
            surviving = {o: v for (q, o), v in topic.produced.items() if q == p and (q, o) not in deleted}
            assert {r["offset"]: _as_produced(r) for r in rows} == surviving, p
    finally:
        broker.close()
    _assert_delta_rs_writable(topic.uri)


def test_core_after_spark_optimize(spark: SparkSession, topic: Topic) -> None:
    _spark_optimize(spark, topic.uri)
    _assert_delta_rs_writable(topic.uri)
    _check_core_after_spark(topic)


def test_core_after_spark_segment_delete(spark: SparkSession, topic: Topic) -> None:
    deleted = _spark_delete_oldest_segment(spark, topic.uri, partition=1)
    _assert_delta_rs_writable(topic.uri)
    _check_core_after_spark(topic, deleted)


def test_core_after_spark_optimize_delete_and_vacuum(spark: SparkSession, topic: Topic) -> None:
    _spark_optimize(spark, topic.uri)
    deleted = _spark_delete_oldest_segment(spark, topic.uri, partition=0)
    _spark_vacuum(spark, topic.uri)
    _assert_delta_rs_writable(topic.uri)
    _check_core_after_spark(topic, deleted)


def test_running_broker_survives_spark_optimize_and_vacuum(spark: SparkSession, topic: Topic) -> None:
    """A broker that stays open while Spark compacts and vacuums keeps appending and reading."""
    # A Spark job that runs beside a live broker reads Delta log entries from its read version on; the
    # broker's log window must outlast the job (docs/decisions.md: reader leases will lift this).
    broker = Broker(topic.storage, BrokerConfig(linger_ms=2, log_retention_ms=600_000))
    try:
        before = {p: _fetch_all(broker, p)[2] for p in range(PARTITIONS)}  # warms the broker's file index
        _spark_optimize(spark, topic.uri)
        _spark_vacuum(spark, topic.uri)
        offsets = _produce(broker, topic.produced, ROUNDS)
        for p in range(PARTITIONS):
            assert offsets[p] == list(range(before[p], before[p] + PER_ROUND)), p
            rows, start, end = _fetch_all(broker, p)
            assert (start, end) == (0, before[p] + PER_ROUND)
            surviving = {o: v for (q, o), v in topic.produced.items() if q == p}
            assert {r["offset"]: _as_produced(r) for r in rows} == surviving, p
    finally:
        broker.close()


# ---------------------------------------------------------------------------- (c) delta-rs after Spark


def _topic_batch(partition: int, segment: int, start: int, n: int) -> pa.Table:
    headers = TOPIC_SCHEMA.field("headers").type
    return pa.Table.from_pydict(
        {
            "key": [f"k{start + i}".encode() for i in range(n)],
            "value": [b"v" for _ in range(n)],
            "topic": ["raw"] * n,
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64()),
            "timestamp": pa.array([BASE_TS * 1000] * n, TOPIC_SCHEMA.field("timestamp").type),
            "timestampType": pa.array([CREATE_TIME] * n, pa.int32()),
            "headers": pa.array([[{"key": "h", "value": b"x"}]] * n, headers),
            "segment": pa.array([segment] * n, pa.int64()),
            "producer_id": pa.nulls(n, pa.int64()),
            "producer_epoch": pa.nulls(n, pa.int32()),
            "sequence": pa.nulls(n, pa.int32()),
        },
        schema=TOPIC_SCHEMA,
    )


def test_delta_rs_appends_after_spark_optimize_and_checkpoint(spark: SparkSession, warehouse: str) -> None:
    uri = str(Path(warehouse) / "raw")
    # versions 0..19 by delta-rs, so Spark's OPTIMIZE is version 20 and writes the table's first checkpoint
    # (delta.checkpointInterval=20): delta-rs must read Spark's checkpoint too.
    DeltaTable.create(
        uri, TOPIC_SCHEMA, partition_by=list(PARTITION_COLUMNS), configuration=TOPIC_TABLE_PROPERTIES
    )
    for i in range(19):
        write_deltalake(uri, _topic_batch(0, 0, 2 * i, 2), mode="append")
    assert DeltaTable(uri).version() == 19

    spark.sql(f"OPTIMIZE delta.`{uri}`").collect()
    assert DeltaTable(uri).version() == 20
    assert (Path(uri) / "_delta_log" / f"{20:020d}.checkpoint.parquet").exists()
    assert len(_files(uri)) == 1
    _assert_delta_rs_writable(uri)

    write_deltalake(uri, _topic_batch(0, 0, 38, 2), mode="append")
    write_deltalake(uri, _topic_batch(1, 0, 0, 3), mode="append")
    table = DeltaTable(uri)
    assert table.version() == 22
    _assert_delta_rs_writable(uri)
    got = table.to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in got) == [(0, o) for o in range(40)] + [
        (1, o) for o in range(3)
    ]
    assert spark.read.format("delta").load(uri).count() == 43
