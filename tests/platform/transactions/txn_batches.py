"""The batches the coordinator tests stage, and what topic ``t``'s table holds after them."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.platform import Storage


def batch(*values: str) -> pa.Table:
    """Unkeyed records of ``values``, one timestamp."""
    return pa.table(
        {
            "key": pa.array([None] * len(values), pa.binary()),
            "value": pa.array([v.encode() for v in values], pa.binary()),
            "timestamp_ms": pa.array([1_700_000_000_000] * len(values), pa.int64()),
        }
    )


def table_values(storage: Storage) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every row of topic ``t``'s table, sorted."""
    rows = DeltaTable(storage.topic_uri("t")).to_pyarrow_table().to_pylist()
    return sorted((r["partition"], r["offset"], r["value"].decode()) for r in rows)
