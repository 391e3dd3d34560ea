"""Spark's own Delta reader over ``s3a://``: what brokers acknowledged on S3 is what Spark and
``topiclake sql`` read.

The session is the shared one, with the S3A jars of the cache (``hadoop-aws`` and only the AWS SDK v2
modules S3A needs, docs/spark.md) and the bucket's settings given by ``topiclake.sparkenv.s3a`` from the
warehouse's storage options.
"""

from __future__ import annotations

import json
import time

import pytest
from pyarrow.fs import FileSelector
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.sparkenv.jars import s3a_jar_paths
from topiclake.sparkenv.s3a import configure, spark_path

pytestmark = pytest.mark.slow


def test_spark_delta_reader_and_topiclake_sql_see_what_brokers_acknowledged(
    spark: SparkSession, s3_warehouse: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, options = s3_warehouse
    assert any("hadoop-aws-" in j for j in s3a_jar_paths()) and not any(
        "bundle-" in j for j in s3a_jar_paths()
    )
    acked: dict[tuple[int, int], str] = {}
    with Broker(Storage(uri, options), BrokerConfig(linger_ms=1, maintenance=False)) as broker:
        broker.create_topic("orders", partitions=2)
        for n in range(3):  # three commits per partition
            records = [Record(key=b"k", value=f"v{n}-{i}".encode(), partition=i % 2) for i in range(6)]
            for r, rec in zip(broker.produce("orders", records, acks="all"), records, strict=True):
                assert r.error is None and r.offset is not None and rec.value is not None
                acked[(r.partition, r.offset)] = rec.value.decode()

    configure(spark, uri, options)
    table = spark_path(Storage(uri, options).topic_uri("orders"))
    assert table.startswith("s3a://")
    rows = spark.read.format("delta").load(table).selectExpr("partition", "offset", "CAST(value AS STRING)")
    assert {(r[0], r[1]): r[2] for r in rows.collect()} == acked

    for key, value in options.items():  # as a user runs it: AWS_* in the environment, an s3:// warehouse
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(
        app,
        [
            "sql",
            "--warehouse",
            uri,
            "--no-catalog",
            "--format",
            "json",
            "SELECT partition, count(*) AS n, max(offset) AS last FROM orders GROUP BY 1 ORDER BY 1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"partition": 0, "n": 9, "last": 8},
        {"partition": 1, "n": 9, "last": 8},
    ]


def test_spark_reads_a_table_from_the_brokers_own_checkpoint(
    spark: SparkSession, s3_warehouse: tuple[str, dict[str, str]]
) -> None:
    """On S3 the broker writes checkpoints itself (platform/log/object_state.py) and deletes the log entries
    before them: Spark's Delta reader opens the table from that checkpoint (files, compaction's removes)."""
    uri, options = s3_warehouse
    config = BrokerConfig(
        linger_ms=0,
        checkpoint_interval=3,
        log_retention_ms=0,
        maintenance_interval_ms=100,
        compact_min_files=4,
    )
    acked: dict[tuple[int, int], str] = {}
    with Broker(Storage(uri, options), config) as broker:
        broker.create_topic("kept", partitions=2)
        stats = broker.log("kept").maintainer.stats
        n = 0
        deadline = time.monotonic() + 60
        while n < 12 or stats.checkpoints < 2 or stats.compactions < 1:
            assert time.monotonic() < deadline, stats
            records = [Record(value=f"v{n}-{p}".encode(), partition=p) for p in (0, 1)]
            for r, rec in zip(broker.produce("kept", records, acks="all"), records, strict=True):
                assert r.error is None and r.offset is not None and rec.value is not None
                acked[(r.partition, r.offset)] = rec.value.decode()
            n += 1
        assert stats.failures == 0, stats
    storage = Storage(uri, options)
    fs = storage.filesystem(storage.topic_uri("kept"))
    names = [i.base_name for i in fs.get_file_info(FileSelector("_delta_log"))]
    assert "00000000000000000000.json" not in names and any(x.endswith(".checkpoint.parquet") for x in names)
    configure(spark, uri, options)
    rows = spark.read.format("delta").load(spark_path(storage.topic_uri("kept")))
    got = rows.selectExpr("partition", "offset", "CAST(value AS STRING)").collect()
    assert {(r[0], r[1]): r[2] for r in got} == acked and len(got) == len(acked)
