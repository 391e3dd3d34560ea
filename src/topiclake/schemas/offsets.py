"""Schema of ``_system/consumer_offsets``: the committed offsets of consumer groups.

One row per commit of one partition's offset. The newest row per (``group``, ``topic``, ``partition``) --
the one with the highest ``commit_seq`` -- is the committed offset; the platform rewrites the table with only
those rows once superseded rows pile up, so the table stays small. Deleting a group rewrites the table
without its rows (no tombstones).

``group`` is a reserved word in SQL: quote it (```group``` in Spark SQL). The committed offsets of a group,
and its lag joined with the topics' end offsets, in Spark SQL::

    SELECT `group`, topic, partition, committed_offset, metadata, commit_timestamp
    FROM delta.`<warehouse>/_system/consumer_offsets`
    QUALIFY row_number() OVER (PARTITION BY `group`, topic, partition ORDER BY commit_seq DESC) = 1
"""

from __future__ import annotations

import pyarrow as pa

from topiclake.schemas.catalog import SYSTEM_TABLE_PROPERTIES

#: Name of the offsets table below ``<warehouse>/_system``.
OFFSETS_TABLE = "consumer_offsets"

OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        # Kafka's meaning: the next offset the group reads from this partition.
        pa.field("committed_offset", pa.int64()),
        pa.field("metadata", pa.string()),
        pa.field("commit_timestamp", pa.timestamp("us", tz="UTC")),
        # Who committed: the member and its generation; null / -1 for a "simple" commit or an admin reset.
        pa.field("member_id", pa.string()),
        pa.field("generation", pa.int32()),
        # Orders the rows of the table: grows by one per row, never reused (also the version of the txn
        # action ``topiclake/consumer_offsets`` that fences concurrent writers).
        pa.field("commit_seq", pa.int64()),
    ]
)

#: Properties of the offsets table: those of every system table, and short log/file retention because
#: the table is rewritten often and nobody needs to time-travel far back in it; every log entry kept slows
#: each commit (see docs/decisions.md), and groups commit often.
OFFSETS_TABLE_PROPERTIES: dict[str, str] = {
    **SYSTEM_TABLE_PROPERTIES,
    "delta.logRetentionDuration": "interval 30 seconds",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
    "delta.enableExpiredLogCleanup": "true",
}
