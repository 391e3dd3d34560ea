"""Schema of ``_system/partition_offsets``: both ends of partitions' logs, recorded when records are removed.

Also the topics' own time travel: the leader of partition 0 records the ends every
``offsets_history_ms`` (when they moved), so "the topic as of T" is every partition below the largest end
recorded at or before T.

A partition's end offset (its high watermark) is a Delta ``txn`` action of its topic table, which SQL
cannot read, and once retention or key compaction removed every record of a partition its table holds
no row to take the ends from. Whatever removes records (the retention, key-compaction and other jobs,
after their commit) appends one row per partition here. Offsets only grow, so the newest ends of a
partition are the largest ones: readers take ``max(log_start_offset)`` and ``max(end_offset)`` per
(``topic_id``, ``partition``), and concurrent writers only ever append (no conflicts, no ordering).
"""

from __future__ import annotations

import pyarrow as pa

from topiclake.schemas.catalog import SYSTEM_TABLE_PROPERTIES

#: Name of the table below ``<warehouse>/_system``.
PARTITION_OFFSETS_TABLE = "partition_offsets"

PARTITION_OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        # tells a topic apart from an earlier, deleted topic of the same name (``_system/topics``)
        pa.field("topic_id", pa.string()),
        pa.field("partition", pa.int32()),
        # the first offset still in the log (= end_offset when the partition is empty)
        pa.field("log_start_offset", pa.int64()),
        # the high watermark: one past the last offset ever assigned
        pa.field("end_offset", pa.int64()),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC")),
        pa.field("recorded_by", pa.string()),
    ]
)

PARTITION_OFFSETS_TABLE_PROPERTIES: dict[str, str] = {
    **SYSTEM_TABLE_PROPERTIES,
    "delta.logRetentionDuration": "interval 1 hours",  # a long log slows every append (docs/decisions.md)
    "delta.enableExpiredLogCleanup": "true",
}
