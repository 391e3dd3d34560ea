"""The ``topiclake`` sink: Kafka-sink columns in, offsets under the gateway's rules, exactly once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_for_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _broker(warehouse: str, **config: object) -> Broker:
    return Broker(Storage(warehouse), BrokerConfig(maintenance=False, **config))  # type: ignore[arg-type]


def _table(warehouse: str, topic: str) -> pa.Table:
    return DeltaTable(Storage(warehouse).topic_uri(topic)).to_pyarrow_table()


def _contiguous(table: pa.Table, partitions: int) -> None:
    rows = table.to_pylist()
    for p in range(partitions):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: {offsets}"


def test_batch_write_partitions_by_key_and_is_exactly_once(spark: SparkSession, warehouse: str) -> None:
    broker = _broker(warehouse)
    broker.create_topic("out", 3)
    broker.close()
    rows = [(f"k{i % 5}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")

    def save() -> None:
        (
            df.write.format("topiclake")
            .option("warehouse", warehouse)
            .option("topic", "out")
            .option("writerId", "job-7")
            .mode("append")
            .save()
        )

    save()
    table = _table(warehouse, "out")
    assert table.num_rows == 40
    for r in table.to_pylist():
        assert r["partition"] == partition_for_key(r["key"], 3)  # Kafka's partitioner on the key bytes
        assert r["topic"] == "out"
    _contiguous(table, 3)
    save()  # the same job again: nothing written twice
    assert _table(warehouse, "out").num_rows == 40
    (
        df.limit(3)
        .write.format("topiclake")
        .option("warehouse", warehouse)
        .option("topic", "out")
        .option("writerId", "job-7")
        .option("writerVersion", "2")
        .mode("append")
        .save()
    )
    assert _table(warehouse, "out").num_rows == 43
    # the gateway continues after the sink's offsets
    broker = _broker(warehouse)
    result = broker.produce("out", [Record(key=b"k1", value=b"after")], acks="all")[0]
    broker.close()
    table = _table(warehouse, "out")
    assert result.offset == max(r["offset"] for r in table.to_pylist() if r["partition"] == result.partition)
    _contiguous(table, 3)


def test_kafka_sink_columns(spark: SparkSession, warehouse: str) -> None:
    broker = _broker(warehouse)
    broker.create_topic("a", 2)
    broker.create_topic("b", 1)
    broker.close()
    df = spark.sql(
        """
        SELECT * FROM VALUES
          (CAST('k' AS BINARY), CAST('v1' AS BINARY), 'a', 1,
           array(named_struct('key', 'h', 'value', CAST('x' AS BINARY))), TIMESTAMP '2026-01-02 03:04:05'),
          (NULL, CAST('v2' AS BINARY), 'b', NULL, NULL, NULL)
        AS t(key, value, topic, partition, headers, timestamp)
        """
    )
    df.write.format("topiclake").option("warehouse", warehouse).mode("append").save()
    a = _table(warehouse, "a").to_pylist()
    b = _table(warehouse, "b").to_pylist()
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in a] == [(1, 0, b"k", b"v1")]
    assert a[0]["headers"] == [{"key": "h", "value": b"x"}]
    assert a[0]["timestamp"].isoformat() == "2026-01-02T03:04:05+00:00"
    assert [(r["offset"], r["key"], r["value"]) for r in b] == [(0, None, b"v2")]


def test_bad_writes_are_refused_and_write_nothing(spark: SparkSession, warehouse: str) -> None:
    broker = _broker(warehouse)
    broker.create_topic("t", 2)
    broker.close()
    version = DeltaTable(Storage(warehouse).topic_uri("t")).version()
    ok = spark.createDataFrame([("v",)], "value string")
    cases = [
        (spark.createDataFrame([("k",)], "key string"), {"topic": "t"}, "append", "'value' column"),
        (ok, {}, "append", "'topic' option"),
        (ok, {"topic": "t"}, "overwrite", "append-only"),
        (ok, {"topic": "missing"}, "append", "missing"),
        (spark.sql("SELECT 'v' AS value, 9 AS partition"), {"topic": "t"}, "append", "no partition 9"),
    ]
    for df, options, mode, message in cases:
        writer = df.write.format("topiclake").option("warehouse", warehouse).mode(mode)
        for k, v in options.items():
            writer = writer.option(k, v)
        with pytest.raises(Exception, match=message):
            writer.save()
    assert DeltaTable(Storage(warehouse).topic_uri("t")).version() == version


def test_spark_writer_beside_the_gateway(spark: SparkSession, warehouse: str) -> None:
    broker = Broker(Storage(warehouse), BrokerConfig(linger_ms=1))
    broker.create_topic("t", 2)
    acked: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                r = broker.produce("t", [Record(key=str(i % 3).encode(), value=f"g{i}".encode())], acks="all")
            except BaseException as exc:
                errors.append(exc)
                return
            if r[0].error is not None:
                errors.append(r[0].error)
                return
            acked.append(f"g{i}".encode())
            i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        for batch in range(3):
            df = spark.createDataFrame(
                [(f"k{i}", f"s{batch}-{i}") for i in range(50)], "key string, value string"
            )
            df.write.format("topiclake").option("warehouse", warehouse).option("topic", "t").option(
                "writerId", f"w{batch}"
            ).mode("append").save()
    finally:
        stop.set()
        thread.join(30)
        broker.close()
    assert not errors, errors
    table = _table(warehouse, "t")
    values = table["value"].to_pylist()
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(acked) <= set(values), "an acknowledged record is missing"
    assert sum(1 for v in values if v.startswith(b"s")) == 150
    _contiguous(table, 2)


def test_stream_sink_skips_a_replayed_batch(spark: SparkSession, warehouse: str, tmp_path: Path) -> None:
    broker = _broker(warehouse)
    broker.create_topic("in", 1)
    broker.create_topic("out", 1)
    broker.produce("in", [Record(value=f"r{i}".encode()) for i in range(20)], acks="all")
    checkpoint = tmp_path / "ckpt"

    def run() -> None:
        query = (
            spark.readStream.format("topiclake")
            .option("warehouse", warehouse)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
            .writeStream.format("topiclake")
            .option("warehouse", warehouse)
            .option("topic", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert sorted(_table(warehouse, "out")["value"].to_pylist()) == sorted(
        f"R{i}".encode() for i in range(20)
    )
    # Lose the record that batch 0 finished (as a crash between the sink's commit and Spark's would): Spark
    # runs batch 0 again on restart, and the sink must not write it twice.
    commits = sorted((checkpoint / "commits").iterdir())
    for f in commits:
        f.unlink()
    broker.produce("in", [Record(value=b"r20")], acks="all")
    broker.close()
    run()
    values = _table(warehouse, "out")["value"].to_pylist()
    assert sorted(values) == sorted(f"R{i}".encode() for i in range(21))
    _contiguous(_table(warehouse, "out"), 1)
