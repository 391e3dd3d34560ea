"""Schema of a topic table: Spark's Kafka source columns plus the platform's own.

The first eight columns are exactly those of Spark's Kafka source (``includeHeaders=true``), so Spark code
written for ``format("kafka")`` reads a topic table unchanged. The rest are the platform's:

- ``segment``: base offset of the segment the record belongs to. A Delta partition column together with
  ``partition``; retention removes whole sealed segments with a metadata-only delete.
- ``producer_id``, ``producer_epoch``, ``sequence``: idempotent-producer fields, null for other records.

Every column is nullable, as in Spark's Kafka source schema.
"""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: The columns of Spark's Kafka source, in its order.
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")

#: Delta partition columns of every topic table.
PARTITION_COLUMNS = ("partition", "segment")

TOPIC_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("segment", pa.int64()),
        pa.field("producer_id", pa.int64()),
        pa.field("producer_epoch", pa.int32()),
        pa.field("sequence", pa.int32()),
    ]
)

#: Spark's Kafka source schema with headers, as a DDL string (no pyspark import needed here).
KAFKA_SOURCE_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)

#: Kafka's timestampType values.
CREATE_TIME = 0
LOG_APPEND_TIME = 1

#: Table properties of every topic table, pinned at creation and checked on open: nothing that delta-rs
#: cannot read and write (no deletion vectors, no column mapping), and checkpoints often enough that
#: opening a table stays cheap.
TOPIC_TABLE_PROPERTIES: dict[str, str] = {
    "delta.enableDeletionVectors": "false",
    "delta.columnMapping.mode": "none",
    "delta.checkpointInterval": "20",
    "delta.appendOnly": "false",
}
