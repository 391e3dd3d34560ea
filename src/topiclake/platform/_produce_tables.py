"""The produce path's columnar steps on an Arrow table of records, before it is queued: cast to the input
schema, find the rows that may break a rule, split rows by target partition. Split from
:mod:`._broker_produce`.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.platform.records import INPUT_SCHEMA


def conform(table: pa.Table) -> pa.Table:
    """The table in the input schema: its columns cast, missing ones null."""
    if table.schema.equals(INPUT_SCHEMA):  # the Kafka listener's batches: nothing to cast
        return table
    n = table.num_rows
    cols = []
    for field in INPUT_SCHEMA:
        if field.name in table.column_names:
            cols.append(table[field.name].cast(field.type))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(cols, schema=INPUT_SCHEMA)


def group(table: pa.Table, targets: list[int]) -> tuple[list[tuple[int, pa.Table]], list[list[int]]]:
    """Split rows by target partition, keeping their order: the batches and each batch's row numbers."""
    first = targets[0]
    if all(t == first for t in targets):
        return [(first, table)], [list(range(len(targets)))]
    order: dict[int, list[int]] = {}
    for row, p in enumerate(targets):
        order.setdefault(p, []).append(row)
    return [(p, table.take(pa.array(rows, pa.int64()))) for p, rows in order.items()], list(order.values())


def suspects(table: pa.Table, explicit: list[int | None], limit: int, n_parts: int) -> list[int]:
    """Rows that may break a rule (size, timestamp, partition), found with columnar work only."""
    anywhere = explicit.count(None) == len(explicit)  # no record names its own partition
    if anywhere and table.nbytes <= limit:
        # no record can be larger than all the bytes together: only a negative timestamp can be wrong
        low = pc.min(table["timestamp_ms"]).as_py()
        if low is None or low >= 0:
            return []
    size = pc.add(
        pc.fill_null(pc.binary_length(table["key"]), 0), pc.fill_null(pc.binary_length(table["value"]), 0)
    )
    headers = table["headers"].combine_chunks()
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            lengths = pc.add(
                pc.binary_length(pc.struct_field(flat, "key")),
                pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0),
            )
            parents = pc.list_parent_indices(headers)
            sums = pa.table({"row": parents, "n": lengths}).group_by("row").aggregate([("n", "sum")])
            extra = [0] * len(headers)
            for row, n in zip(sums["row"].to_pylist(), sums["n_sum"].to_pylist(), strict=True):
                extra[row] = n
            size = pc.add(size, pa.array(extra, pa.int64()))
    bad = pc.or_(pc.greater(size, limit), pc.fill_null(pc.less(table["timestamp_ms"], 0), False))
    rows = set(pc.indices_nonzero(bad).to_pylist())
    if not anywhere:
        rows.update(i for i, p in enumerate(explicit) if p is not None and not 0 <= p < n_parts)
    return sorted(rows)
