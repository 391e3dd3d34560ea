"""A commit's rows as Delta data files: split by (partition, segment), their Delta statistics, their Parquet.

Split from :mod:`.fast_append` (the local append path) and shared with :mod:`.object_append` and
:mod:`.blind_append`. A commit over many partitions writes a file per partition, so everything here is
done once per commit where it can be: one sort and one ``take`` split the rows (each file is then a
zero-copy slice of one table), the integer statistics of all files come from one numpy ``reduceat``, and
the columns every small file leaves out are found once (docs/decisions.md, "Many partitions").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Columns with min/max statistics: those delta-rs gives them to (binary and nested columns get none).
STATS_COLUMNS = ("topic", "offset", "timestamp", "timestampType", "producer_id", "producer_epoch", "sequence")
_STRING_STATS_MAX = 32  # Delta's own prefix length for string statistics; longer values get none
#: Files of fewer rows are written with minimal Parquet options (see :func:`encode`).
SMALL_FILE_ROWS = 1024
#: A small file's Parquet options: no dictionaries, page statistics of the offset and timestamp only, no
#: stored Arrow schema (the Parquet types say the same: the timestamp is UTC microseconds; ~10 us a file)
_SMALL_OPTIONS: dict[str, Any] = {
    "compression": "snappy",
    "use_dictionary": False,
    "write_statistics": ["offset", "timestamp"],
    "store_schema": False,
}
#: Statistics columns stored as integers (the timestamp as microseconds since the epoch, UTC).
_NUMERIC_STATS = frozenset(
    {"offset", "timestamp", "timestampType", "producer_id", "producer_epoch", "sequence"}
)
_PARTITION_COLUMNS = ["partition", "segment"]


@dataclass
class Split:
    """A table's rows by (partition, segment): ``table`` holds each group's rows together (in their
    order), group ``i`` being ``counts[i]`` rows from ``starts[i]``, keyed ``keys[i]``."""

    table: pa.Table
    keys: list[tuple[int, int]]
    starts: list[int]
    counts: list[int]

    def groups(self) -> list[tuple[tuple[int, int], pa.Table]]:
        """Each group's key and rows (zero-copy slices of :attr:`table`)."""
        if len(self.keys) == 1:
            return [(self.keys[0], self.table)]
        return [
            (key, self.table.slice(start, count))
            for key, start, count in zip(self.keys, self.starts, self.counts, strict=True)
        ]


def split(data: pa.Table) -> Split:
    """``data`` split by (partition, segment), in first-seen order (numpy: an Acero group-by and a filter
    per group cost more than the Parquet encoding of a small commit). Rows already grouped in ascending
    order (a local commit builds its table so) are split into runs where they stand; other tables of many
    groups cost one stable sort and one ``take``."""
    parts = data["partition"].to_numpy()
    segs = data["segment"].to_numpy()
    if (parts == parts[0]).all() and (segs == segs[0]).all():
        return Split(data, [(int(parts[0]), int(segs[0]))], [0], [data.num_rows])
    keys = parts.astype(np.int64) << 40 | segs.astype(np.int64)
    mask = (1 << 40) - 1
    if (keys[1:] >= keys[:-1]).all():  # already grouped (a local commit's table): runs, no take
        bounds = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        starts_ = np.concatenate(([0], bounds))
        counts_ = np.diff(np.concatenate((starts_, [len(keys)])))
        return Split(
            data if data.column(0).num_chunks == 1 else data.combine_chunks(),
            [(int(k) >> 40, int(k) & mask) for k in keys[starts_]],
            starts_.tolist(),
            counts_.tolist(),
        )
    uniq, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first)  # the groups in first-seen order
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    by_group = np.argsort(rank[inverse], kind="stable")  # rows keep their order within a group
    grouped = data.take(pa.array(by_group)).combine_chunks()
    ordered = counts[order]
    starts = np.concatenate(([0], np.cumsum(ordered)[:-1]))
    return Split(
        grouped,
        [(int(k) >> 40, int(k) & mask) for k in uniq[order]],
        starts.tolist(),
        ordered.tolist(),
    )


def groups(data: pa.Table) -> list[tuple[tuple[int, int], pa.Table]]:
    """``data``'s rows by (partition, segment) (:func:`split`), as (key, rows) pairs."""
    return split(data).groups()


# ---------------------------------------------------------------------------------------- statistics


def file_stats(rows: pa.Table) -> dict[str, object]:
    """Delta file statistics of ``rows`` as delta-rs writes them."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in STATS_COLUMNS:
        column_stats(name, rows[name], mins, maxs, nulls)
    return {"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def column_stats(
    name: str,
    column: pa.ChunkedArray,
    mins: dict[str, object],
    maxs: dict[str, object],
    nulls: dict[str, int],
) -> None:
    """One column's null count, minimum and maximum into ``nulls``, ``mins`` and ``maxs``."""
    nulls[name] = column.null_count
    if column.null_count == len(column):
        return
    if column.null_count == 0 and column.num_chunks == 1 and name in _NUMERIC_STATS:
        # numpy over the one chunk's buffer: a few us, where pc.min_max costs tens (per file, per
        # column: a commit of many partitions writes many files)
        values = _integers(column)
        low, high = int(values.min()), int(values.max())
        mins[name], maxs[name] = (_iso_ms(low), _iso_ms(high)) if name == "timestamp" else (low, high)
        return
    lo, hi = pc.min_max(column).values()
    if pa.types.is_timestamp(column.type):
        mins[name] = _iso_ms(lo.value)
        maxs[name] = _iso_ms(hi.value)
    elif pa.types.is_string(column.type):
        low_s, high_s = lo.as_py(), hi.as_py()
        if len(low_s) <= _STRING_STATS_MAX and len(high_s) <= _STRING_STATS_MAX:
            mins[name], maxs[name] = low_s, high_s
    else:
        mins[name], maxs[name] = lo.as_py(), hi.as_py()


def _integers(column: pa.ChunkedArray) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A null-free integer or timestamp column of one chunk as int64 numbers (microseconds)."""
    values: np.ndarray[Any, Any] = column.chunk(0).to_numpy()
    return values.view(np.int64) if values.dtype.kind == "M" else values


def split_stats(rows: Split) -> list[dict[str, object]]:
    """:func:`file_stats` of each group of ``rows``, the integer columns of all groups at once (numpy's
    ``reduceat`` over the grouped table): a commit over many partitions writes a file per partition, and
    per-file statistics were a tenth of its time."""
    if len(rows.keys) == 1 or not all(rows.counts):
        return [file_stats(g) for _, g in rows.groups()]
    joined = rows.table
    starts = np.asarray(rows.starts, dtype=np.int64)
    n = len(rows.keys)
    mins: list[dict[str, object]] = [{} for _ in range(n)]
    maxs: list[dict[str, object]] = [{} for _ in range(n)]
    nulls: list[dict[str, int]] = [{} for _ in range(n)]
    groups_rows: list[pa.Table] | None = None
    for name in STATS_COLUMNS:
        column = joined[name]
        if name not in _NUMERIC_STATS and _same_in_all(name, column, mins, maxs, nulls):
            continue
        if name not in _NUMERIC_STATS or column.null_count or column.num_chunks != 1:
            groups_rows = groups_rows or [g for _, g in rows.groups()]
            for i, g in enumerate(groups_rows):  # the general way, group by group
                column_stats(name, g[name], mins[i], maxs[i], nulls[i])
            continue
        values = _integers(column)
        lows = np.minimum.reduceat(values, starts).tolist()
        highs = np.maximum.reduceat(values, starts).tolist()
        timestamp = name == "timestamp"
        for i in range(n):
            nulls[i][name] = 0
            low, high = lows[i], highs[i]
            mins[i][name], maxs[i][name] = (_iso_ms(low), _iso_ms(high)) if timestamp else (low, high)
    return [
        {"numRecords": count, "minValues": mins[i], "maxValues": maxs[i], "nullCount": nulls[i]}
        for i, count in enumerate(rows.counts)
    ]


def _same_in_all(
    name: str,
    column: pa.ChunkedArray,
    mins: list[dict[str, object]],
    maxs: list[dict[str, object]],
    nulls: list[dict[str, int]],
) -> bool:
    """One column's statistics for every group at once when it holds a single value without nulls
    (the ``topic`` column always does): one ``min_max`` for the commit instead of one per file."""
    if column.null_count or not len(column):
        return False
    lo, hi = pc.min_max(column).values()
    if lo != hi:
        return False
    value = lo.as_py()
    if pa.types.is_string(column.type) and len(value) > _STRING_STATS_MAX:
        value = None  # Delta keeps no statistics for longer strings
    for i in range(len(mins)):
        nulls[i][name] = 0
        if value is not None:
            mins[i][name] = maxs[i][name] = value
    return True


def _iso_ms(micros: int) -> str:
    """A timestamp statistic: UTC, truncated to the millisecond (as delta-rs and Spark write them)."""
    millis = micros // 1000
    return f"{_iso_second(millis // 1000)}.{millis % 1000:03d}Z"


@functools.lru_cache(maxsize=256)  # a commit's timestamps fall in the same few seconds
def _iso_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


# ---------------------------------------------------------------------------------------- Parquet


class Stored:
    """The columns a table's files store, worked out once for all of its groups: the table without its
    partition columns (a file's folder names them) and, for small files, also without the nullable
    columns the whole table holds only nulls in."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._full: pa.Table | None = None
        self._small: pa.Table | None = None

    def full(self) -> pa.Table:
        if self._full is None:
            self._full = self._table.drop_columns(_PARTITION_COLUMNS)
        return self._full

    def small(self) -> pa.Table:
        if self._small is None:
            full = self.full()
            rows = full.num_rows
            nulls = [f.name for f in full.schema if f.nullable and rows and full[f.name].null_count == rows]
            self._small = full.drop_columns(nulls)
        return self._small

    def encode(self, start: int, count: int) -> pa.Buffer:
        """The Parquet file of rows ``start`` to ``start + count`` (see :func:`encode`)."""
        sink = pa.BufferOutputStream()
        if count < SMALL_FILE_ROWS:
            small = self.small()
            rows = small if count == small.num_rows else small.slice(start, count)
            pq.write_table(rows, sink, **_SMALL_OPTIONS)
        else:
            full = self.full()
            rows = full if count == full.num_rows else full.slice(start, count)
            pq.write_table(rows, sink, compression="snappy")
        return sink.getvalue()


def encode(rows: pa.Table) -> pa.Buffer:
    """``rows`` as a Parquet file in memory (the partition columns are the file's folder).

    A small file (an append's few records per partition; compaction merges it within seconds) is
    written without dictionaries, with Parquet statistics of the offset and timestamp only and without a
    stored Arrow schema: less CPU a file, and a commit over many partitions writes a file each. Its
    nullable columns that hold only nulls (headers and the producer fields of plain records, the key of
    unkeyed ones) are left out: a file costs pyarrow 10-45 us a column whatever its rows. Delta readers
    read a column a file lacks as nulls (as after an added column; delta-rs, Spark and
    :func:`.file_index.file_table` do). Delta's own statistics (the ``add`` action's) are unchanged."""
    return Stored(rows).encode(0, rows.num_rows)
