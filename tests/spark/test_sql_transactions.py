"""SQL never sees an aborted record, nor one of a transaction still open (issue 31 item 4): a topic written
by a Kafka transactional producer (confluent-kafka over the listener) with a committed, an aborted and an
open transaction, queried through the topics' catalog on the shared Spark session; then the open one
commits and the next query shows it."""

from __future__ import annotations

import sys
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import start_gateway, stop_gateway

from topiclake.process.ports import free_port
from topiclake.spark.catalog import register_tables


def _values(spark: SparkSession, table: str) -> list[str]:
    rows = spark.sql(f"SELECT CAST(value AS STRING) AS v FROM {table}").collect()
    return sorted(r.v for r in rows)


def test_sql_sees_committed_transactions_only(spark: SparkSession, tmp_path: Path) -> None:
    port = free_port()
    warehouse = tmp_path / "wh"
    gw, server, thread = start_gateway(warehouse, kafka_port=port)
    try:
        gw.broker.create_topic("sqltx", partitions=2)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "transactional.id": "sql-tx", "linger.ms": 5})
        p.init_transactions(30)
        for prefix, count, end in (("c", 6, p.commit_transaction), ("a", 4, p.abort_transaction)):
            p.begin_transaction()
            for i in range(count):
                p.produce("sqltx", f"{prefix}{i}".encode(), partition=i % 2)
            end(30)
        p.begin_transaction()
        for i in range(3):
            p.produce("sqltx", f"o{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0  # the open transaction's records reached the broker

        table = register_tables(spark, str(warehouse)).tables["sqltx"]
        committed = sorted(f"c{i}" for i in range(6))
        assert _values(spark, table) == committed  # neither aborted nor open records

        p.commit_transaction(30)
        assert _values(spark, table) == sorted([*committed, "o0", "o1", "o2"])  # the next query sees it
        offsets = spark.sql(f"SELECT partition, offset FROM {table}").collect()
        for part in (0, 1):
            mine = sorted(r.offset for r in offsets if r.partition == part)
            assert mine == list(range(len(mine))), f"partition {part}: offsets not contiguous"
    finally:
        stop_gateway(gw, server, thread)
