"""Spark's Kafka source schema, shared by :mod:`topiclake.spark.datasource` and :mod:`topiclake.spark.source`
(it lived in the first, which made a cycle with the second; the first still re-exports it)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (built here: parsing DDL needs a JVM, which data source workers lack)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)
