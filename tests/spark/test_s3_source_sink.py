"""The ``topiclake`` source and sink over an S3 warehouse, without hadoop-aws.

Both reach the warehouse through delta-rs (``storage.<key>`` options), not through Spark's Hadoop
filesystems, so they work on ``s3://`` with the local S3 API server and no AWS jars in Spark. (Spark's own
Delta reader and the Spark jobs need ``s3a://`` and hadoop-aws: docs/object-storage.md.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from topiclake.objectstore import LocalS3Server
from topiclake.platform import Broker, BrokerConfig, Record, Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict[str, str]]:
    with LocalS3Server() as server:
        server.create_bucket("spark-lake")
        yield {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


def test_source_reads_and_sink_writes_an_s3_topic(spark: SparkSession, s3_options: dict[str, str]) -> None:
    uri = "s3://spark-lake/wh"
    with Broker(Storage(uri, s3_options), BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("orders", partitions=2)
        broker.create_topic("copy", partitions=2)
        broker.produce("orders", [Record(key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(20)])
    storage = {f"storage.{k}": v for k, v in s3_options.items()}
    df = (
        spark.read.format("topiclake")
        .option("warehouse", uri)
        .option("subscribe", "orders")
        .options(**storage)
        .load()
    )
    assert sorted(r.value.decode() for r in df.select("value").collect()) == sorted(
        f"v{i}" for i in range(20)
    )
    (
        df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .write.format("topiclake")
        .option("warehouse", uri)
        .option("topic", "copy")
        .option("writerId", "s3-copy")
        .options(**storage)
        .mode("append")
        .save()
    )
    with Broker(Storage(uri, s3_options), BrokerConfig(linger_ms=1)) as broker:
        got = [broker.fetch("copy", p, 0).records for p in range(2)]
        values = sorted(v.decode() for t in got for v in t["value"].to_pylist())
        assert values == sorted(f"V{i}" for i in range(20))
        for t in got:
            assert t["offset"].to_pylist() == list(range(t.num_rows))
