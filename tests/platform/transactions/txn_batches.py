"""The batches the coordinator tests stage, what topic ``t``'s table holds after them, and a crash of the
coordinator's table at one kind of row."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.errors import StorageError
from topiclake.platform import Storage
from topiclake.platform.transactions import TransactionCoordinator


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


def fail_on(coord: TransactionCoordinator, kind: str) -> None:
    """Make the coordinator's table refuse rows of one kind (a crash at that point of the commit)."""
    table: Any = coord._table
    real = table.append

    def append(rows: list[Any]) -> None:
        if any(r.kind == kind for r in rows):
            raise StorageError(f"injected: {kind} not written")
        real(rows)

    table.append = append
