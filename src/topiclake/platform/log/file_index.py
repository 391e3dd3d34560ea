"""Per-partition index of a topic table's data files, built from the Delta log's add actions.

Every data file belongs to one (partition, segment) pair and holds a contiguous-or-gapped, ascending
range of offsets; the index keeps, per partition, the files sorted by their minimum offset, so a fetch
opens only the files that overlap the offsets it wants, never every file of the table.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.schemas import TOPIC_SCHEMA

logger = logging.getLogger(__name__)

_STORED_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name not in ("partition", "segment")])


@dataclass(frozen=True, slots=True)
class DataFile:
    """One data file of a topic table."""

    path: str
    partition: int
    segment: int
    min_offset: int
    max_offset: int
    num_records: int
    size_bytes: int
    max_timestamp_us: int | None
    modification_time_ms: int


def data_file_of_add(add: Mapping[str, Any], stats: Mapping[str, Any]) -> DataFile:
    """The :class:`DataFile` of a log entry's ``add`` action and its parsed ``stats`` (offsets 0 to -1 when
    the statistics do not give them)."""
    mins, maxs = stats.get("minValues") or {}, stats.get("maxValues") or {}
    values = add.get("partitionValues") or {}
    ts = maxs.get("timestamp")
    return DataFile(
        path=str(add["path"]),
        partition=int(values["partition"]),
        segment=int(values["segment"]),
        min_offset=int(mins.get("offset", 0)),
        max_offset=int(maxs.get("offset", -1)),
        num_records=int(stats.get("numRecords") or 0),
        size_bytes=int(add["size"]),
        max_timestamp_us=_micros(ts) if isinstance(ts, str) else None,
        modification_time_ms=int(add["modificationTime"]),
    )


def _micros(iso: str) -> int:
    stamp = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return int(stamp.timestamp() * 1_000_000)


class FileIndex:
    """The data files of one table version, per partition, ordered by offset.

    Args:
        version: Delta version the index was built from.
        files: All data files of that version.
    """

    def __init__(self, version: int, files: list[DataFile]) -> None:
        self.version = version
        self._by_partition: dict[int, list[DataFile]] = {}
        for f in sorted(files, key=lambda f: (f.partition, f.min_offset)):
            self._by_partition.setdefault(f.partition, []).append(f)

    def partitions(self) -> list[int]:
        """Partitions that have at least one data file."""
        return sorted(self._by_partition)

    def files(self, partition: int) -> list[DataFile]:
        """All files of a partition, ordered by offset."""
        return list(self._by_partition.get(partition, ()))

    def files_from(self, partition: int, offset: int) -> list[DataFile]:
        """Files of a partition holding offsets >= ``offset``, ordered by their first offset.

        Files may overlap in offset range (a compaction can bin-pack files in any order), so this is a scan
        over the partition's files, which compaction keeps few.
        """
        return [f for f in self._by_partition.get(partition, ()) if f.max_offset >= offset]

    def log_start_offset(self, partition: int) -> int | None:
        """The log start offset of a partition: the base offset of its oldest remaining segment (None if it
        has no files).

        As in Kafka, only retention (which drops whole segments) or deleting records moves it; key
        compaction, which removes records inside segments but keeps their base offsets, does not. Every
        segment's base is at or below the offsets it holds, so this is never above the first record.
        """
        files = self._by_partition.get(partition)
        if not files:
            return None
        return min(min(f.segment for f in files), files[0].min_offset)

    def end_offset(self, partition: int) -> int | None:
        """One past the largest offset in the table for a partition, or None if it has no files."""
        files = self._by_partition.get(partition)
        return max(f.max_offset for f in files) + 1 if files else None

    def segment_stats(self, partition: int) -> tuple[int, int, int] | None:
        """(base offset, bytes, oldest file time ms) of the newest segment of a partition."""
        files = self._by_partition.get(partition)
        if not files:
            return None
        newest = max(f.segment for f in files)
        current = [f for f in files if f.segment == newest]
        return newest, sum(f.size_bytes for f in current), min(f.modification_time_ms for f in current)


def build_index(dt: DeltaTable, fs: pafs.FileSystem) -> FileIndex:
    """Index the data files of the table version ``dt`` is at.

    Files whose add action lacks offset statistics are indexed from their Parquet footer instead.
    """
    actions = pa.table(dt.get_add_actions(flatten=True))
    names = set(actions.column_names)
    cols = actions.to_pydict()
    n = actions.num_rows
    none = [None] * n
    mins = cols.get("min.offset", none)
    maxs = cols.get("max.offset", none)
    max_ts = pc.cast(actions["max.timestamp"], pa.int64()).to_pylist() if "max.timestamp" in names else none
    files = []
    for i in range(n):
        lo, hi = mins[i], maxs[i]
        if lo is None or hi is None:
            lo, hi = _footer_offsets(fs, cols["path"][i])
        files.append(
            DataFile(
                path=cols["path"][i],
                partition=int(cols["partition.partition"][i]),
                segment=int(cols["partition.segment"][i]),
                min_offset=int(lo),
                max_offset=int(hi),
                num_records=int(cols["num_records"][i] or 0),
                size_bytes=int(cols["size_bytes"][i]),
                max_timestamp_us=max_ts[i],
                modification_time_ms=int(cols["modification_time"][i]),
            )
        )
    return FileIndex(dt.version(), files)


def _footer_offsets(fs: pafs.FileSystem, path: str) -> tuple[int, int]:
    meta = pq.ParquetFile(fs.open_input_file(path)).metadata
    idx = meta.schema.names.index("offset")
    lo: int | None = None
    hi: int | None = None
    for rg in range(meta.num_row_groups):
        stats = meta.row_group(rg).column(idx).statistics
        if stats is None or not stats.has_min_max:
            col = pq.read_table(fs.open_input_file(path), columns=["offset"])["offset"]
            return int(pc.min(col).as_py()), int(pc.max(col).as_py())
        lo = stats.min if lo is None else min(lo, stats.min)
        hi = stats.max if hi is None else max(hi, stats.max)
    if lo is None or hi is None:
        return 0, -1
    return int(lo), int(hi)


def read_file(fs: pafs.FileSystem, f: DataFile) -> pa.Table:
    """Read one data file with the topic table's columns (partition columns restored), by offset."""
    return file_table(pq.read_table(fs.open_input_file(f.path)), f)


def file_table(table: pa.Table, f: DataFile) -> pa.Table:
    """The rows of data file ``f``, as read from its Parquet, with the topic table's columns (partition
    columns restored), by offset."""
    return by_offset(with_partition(table, f))


def with_partition(table: pa.Table, f: DataFile) -> pa.Table:
    """Rows read from data file ``f`` with the topic table's columns: its partition columns restored
    from the file's Delta partition values, and the nullable columns the file lacks (a small file
    leaves out the columns it holds only nulls in, :func:`.fast_append.encode`) as nulls."""
    n = table.num_rows
    present = set(table.column_names)
    columns = [
        table[name] if name in present else pa.nulls(n, field.type)
        for name, field in zip(_STORED_SCHEMA.names, _STORED_SCHEMA, strict=True)
    ]
    table = pa.Table.from_arrays(columns, names=_STORED_SCHEMA.names)
    table = table.append_column("partition", pa.array([f.partition] * n, pa.int32()))
    table = table.append_column("segment", pa.array([f.segment] * n, pa.int64()))
    return table.select(TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)


def by_offset(table: pa.Table) -> pa.Table:
    """``table`` ordered by offset: as it is when it already is (the usual case, checked in one pass; a
    sort moves every column, for a compaction of millions of records the larger part of its CPU)."""
    offsets = table["offset"]
    if table.num_rows > 1 and not pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py():
        return table.sort_by("offset")
    return table


def read_files(
    fs: pafs.FileSystem, files: list[DataFile], min_offset: int, cache: SmallFileCache | None = None
) -> pa.Table:
    """Read several data files at once (in parallel) into one table ordered by offset, keeping only
    offsets >= ``min_offset``; the partition columns are restored from each file's Delta partition values.

    With ``cache``, small files are taken from it when there, and kept in it when read.
    """
    if not files:
        return TOPIC_SCHEMA.empty_table()
    if cache is None:
        return by_offset(_read_dataset(fs, files, pc.field("offset") >= min_offset))
    tables: list[pa.Table] = []
    missing: list[DataFile] = []
    others: list[DataFile] = []
    for f in files:
        if not cache.keeps(f.size_bytes):
            others.append(f)
        elif (hit := cache.get(f.path)) is not None:
            tables.append(hit)
        else:
            missing.append(f)
    if missing:  # one parallel read, split back into files by fragment
        read = _read_dataset(fs, missing, None, by_file=True)
        index = read["__fragment_index"]
        read = read.drop_columns(["__fragment_index"])
        counts = pc.value_counts(index)
        start = 0
        for item in counts:
            n = item["counts"].as_py()
            f = missing[item["values"].as_py()]
            part = read.slice(start, n)
            start += n
            cache.put(f.path, part)
            tables.append(part)
    if others:
        tables.append(_read_dataset(fs, others, pc.field("offset") >= min_offset))
    table = pa.concat_tables(tables)
    if table.column(0).num_chunks > 1:  # one chunk per small file: kernels cost per chunk
        table = table.combine_chunks()
    if min_offset > 0 and table.num_rows and int(pc.min(table["offset"]).as_py()) < min_offset:
        table = table.filter(pc.greater_equal(table["offset"], min_offset))  # a copy: only when needed
    return by_offset(table)


def _read_dataset(
    fs: pafs.FileSystem, files: list[DataFile], where: pc.Expression | None, by_file: bool = False
) -> pa.Table:
    import pyarrow.dataset as ds  # 0.3 s of a broker's start (it imports pandas): only once a read needs it

    dataset = ds.FileSystemDataset.from_paths(
        [f.path for f in files],
        schema=TOPIC_SCHEMA,
        format=ds.ParquetFileFormat(),
        filesystem=fs,
        partitions=[
            (pc.field("partition") == pa.scalar(f.partition, pa.int32()))
            & (pc.field("segment") == pa.scalar(f.segment, pa.int64()))
            for f in files
        ],
    )
    if not by_file:
        table = dataset.to_table(filter=where, use_threads=True)
        return table.select(TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)
    table = dataset.to_table(columns=[*TOPIC_SCHEMA.names, "__fragment_index"], use_threads=True)
    if not _by_file_ordered(table):  # the scan keeps files in order as a rule: a sort moves every column
        table = table.sort_by([("__fragment_index", "ascending"), ("offset", "ascending")])
    data = table.select(TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)
    return data.append_column("__fragment_index", table["__fragment_index"])


def _by_file_ordered(table: pa.Table) -> bool:
    """Whether ``table`` is ordered by (``__fragment_index``, ``offset``), checked in one pass."""
    if table.num_rows < 2:
        return True
    frag, offsets = table["__fragment_index"], table["offset"]
    step = pc.subtract(frag[1:], frag[:-1])
    rising = pc.greater(offsets[1:], offsets[:-1])
    ok = pc.or_(pc.greater(step, 0), pc.and_(pc.equal(step, 0), rising))
    return bool(pc.all(ok).as_py())
