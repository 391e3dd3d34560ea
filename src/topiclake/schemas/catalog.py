"""Schemas of the platform's system tables under ``<warehouse>/_system``."""

from __future__ import annotations

import pyarrow as pa

#: ``_system/topics``: one row per change of a topic (create, alter, grow, delete); the newest row per
#: name (highest ``revision``) is the topic's state.
CATALOG_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("topic_id", pa.string()),
        pa.field("revision", pa.int64()),
        pa.field("partitions", pa.int32()),
        pa.field("configs", pa.string()),  # JSON object of Kafka config name -> value (overrides only)
        pa.field("created_ms", pa.int64()),
        pa.field("updated_ms", pa.int64()),
        pa.field("deleted", pa.bool_()),
    ]
)

SYSTEM_TABLE_PROPERTIES: dict[str, str] = {
    "delta.enableDeletionVectors": "false",
    "delta.checkpointInterval": "20",
}
