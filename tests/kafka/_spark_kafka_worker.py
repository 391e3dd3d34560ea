"""Run by test_spark.py in its own process: Spark's own Kafka connector against the listener.

Usage: python _spark_kafka_worker.py BOOTSTRAP JARS(comma-separated) — writes 100 rows to topic ``sw`` with
``df.write.format("kafka")``, reads topic ``sr`` (already filled) in a batch and as a stream, reads topic
``stx`` (committed, aborted and open transactions) with ``kafka.isolation.level`` read_committed and
read_uncommitted, and prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    bootstrap, jars = sys.argv[1], sys.argv[2]
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("topiclake-kafka-test")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = spark.range(100).select(
            F.col("id").cast("string").alias("key"),
            F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        )
        rows.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", "sw").save()
        batch = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "sr")
            .option("startingOffsets", "earliest")
            .load()
        )
        got = sorted(
            (r.key.decode(), r.value.decode(), r.partition, r.offset)
            for r in batch.select("key", "value", "partition", "offset").collect()
        )
        isolated = {
            level: sorted(
                r.v
                for r in spark.read.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("kafka.isolation.level", level)
                .option("subscribe", "stx")
                .option("startingOffsets", "earliest")
                .load()
                .selectExpr("CAST(value AS STRING) v")
                .collect()
            )
            for level in ("read_committed", "read_uncommitted")
        }
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "sr")
            .option("startingOffsets", "earliest")
            .load()
        )
        with tempfile.TemporaryDirectory() as ckpt:
            q = (
                stream.selectExpr("CAST(value AS STRING) v")
                .writeStream.format("memory")
                .queryName("sr_stream")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination(120)
            streamed = sorted(r.v for r in spark.sql("SELECT v FROM sr_stream").collect())
        print(json.dumps({"batch": got, "streamed": streamed, "isolated": isolated}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
