"""The commit path's append to a topic table on a local warehouse, without delta-rs's commit machinery.

Measured with deltalake 1.6.6 on the 2-core machine (docs/decisions.md, "The local append path"): a
delta-rs append of 16 one-record rows costs 4-5 ms on a quiet table and ~10 ms beside a busy event loop,
of which writing the Parquet file is 0.6 ms; the rest is its commit machinery (snapshot bookkeeping,
conflict checker, a Tokio runtime hop). A topic commit is always the same blind append, so on a local
disk the flusher writes it directly, as the Delta protocol (reader 1, writer 2) defines it:

- one Parquet file per (partition, segment), written by pyarrow without the partition columns, named
  like delta-rs's, with the statistics delta-rs writes (``numRecords``, min/max and null counts of the
  scalar columns; timestamps as ISO strings truncated to the millisecond, as delta-rs does);
- one log entry ``_delta_log/<version>.json`` (``commitInfo``, ``add`` and ``txn`` actions), written to
  a temporary file and linked to its name, which fails if the version exists: the put-if-absent every
  Delta writer on a local disk uses, so delta-rs, Spark and this path exclude each other per version.

When the version is taken, :meth:`LocalAppender.commit` reads the winning entries and raises
:class:`LostRace` with what they hold; the caller retries at the next version unless a winner wrote the
topic's own ``txn`` ids or changed the table's metadata or protocol (then it refreshes its snapshot and
rebases, as after a delta-rs conflict). Readers, checkpoints, compaction and vacuum stay delta-rs's.
"""

from __future__ import annotations

import errno
import functools
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from topiclake import __version__
from topiclake.platform.log.spare_files import write_new

PARTITIONS_JSON = '["partition","segment"]'
#: Columns with min/max statistics: those delta-rs gives them to (binary and nested columns get none).
STATS_COLUMNS = ("topic", "offset", "timestamp", "timestampType", "producer_id", "producer_epoch", "sequence")
ENGINE = f"topiclake/{__version__} (pyarrow {pa.__version__})"
#: Log entries an appender keeps for the maintainer's table state (:meth:`LocalAppender.take_entry`); past
#: that the oldest are dropped (the maintainer reads them from the disk).
ENTRIES_KEPT = 5_000
_STRING_STATS_MAX = 32  # Delta's own prefix length for string statistics; longer values get none
#: Files of fewer rows are written with minimal Parquet options (see :func:`encode`).
SMALL_FILE_ROWS = 1024
_PAGE_STATS = ["offset", "timestamp"]
#: Statistics columns stored as integers (the timestamp as microseconds since the epoch, UTC).
_NUMERIC_STATS = frozenset(
    {"offset", "timestamp", "timestampType", "producer_id", "producer_epoch", "sequence"}
)


@dataclass
class Winners:
    """What other writers committed at the versions this writer tried."""

    versions: list[int] = field(default_factory=list)
    txns: dict[str, int] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)  # paths of the files they removed
    changed_table: bool = False  # a metaData or protocol action: the table may no longer be ours to write

    def add_entry(self, version: int, raw: bytes) -> str | None:
        """Take in the log entry ``raw`` another writer committed at ``version``; return its
        ``topiclake.commit`` id (None: not a topiclake commit)."""
        commit_id = None
        for line in raw.splitlines():
            if not line.strip():
                continue
            action = orjson.loads(line)
            if "txn" in action:
                txn = action["txn"]
                self.txns[txn["appId"]] = int(txn["version"])
            elif "remove" in action:
                self.removed.add(str(action["remove"]["path"]))
            elif "metaData" in action or "protocol" in action:
                self.changed_table = True
            elif "commitInfo" in action:
                commit_id = action["commitInfo"].get("topiclake.commit")
        self.versions.append(version)
        return commit_id


class LostRace(Exception):
    """Another writer committed the version this writer tried; ``winners`` says what it wrote."""

    def __init__(self, winners: Winners) -> None:
        super().__init__(f"versions {winners.versions} were taken by other writers")
        self.winners = winners


class LocalAppender:
    """Blind appends to one topic table in a local directory, at ``version + 1`` each time."""

    def __init__(self, root: str, version: int) -> None:
        self.root = root
        self.log_dir = os.path.join(root, "_delta_log")
        self.version = version  # the newest version this writer knows to exist
        self._dirs: set[str] = set()
        #: the last :meth:`write_files`' rows by (partition, segment): zero-copy slices of one table, which
        #: the flusher hands to the partitions' tail caches instead of joining each partition's batches
        self.last_groups: list[tuple[tuple[int, int], pa.Table]] = []
        self._entries: dict[int, bytes] = {}  # version -> entry, written or read here (take_entry)
        self._entries_lock = threading.Lock()

    # ------------------------------------------------------------------ data files

    def write_files(self, data: pa.Table, data_change: bool = True) -> list[dict[str, dict[str, object]]]:
        """Write ``data`` (topic schema, partition columns included) as one Parquet file per (partition,
        segment) and return their ``add`` actions (``data_change`` False: a rewrite of records already
        in the table, which streaming readers skip)."""
        groups = _groups(data)
        self.last_groups = groups
        stats = groups_stats([rows for _, rows in groups])
        encoded = [encode(rows) for _, rows in groups]
        now = int(time.time() * 1000)
        return [
            self._write_group(key, rows, now, data_change, st, enc)
            for (key, rows), st, enc in zip(groups, stats, encoded, strict=True)
        ]

    def _write_group(
        self,
        key: tuple[int, int],
        rows: pa.Table,
        now: int,
        data_change: bool,
        stats: dict[str, object],
        encoded: pa.Buffer,
    ) -> dict[str, dict[str, object]]:
        partition, segment = key
        rel = f"partition={partition}/segment={segment}"
        folder = os.path.join(self.root, rel)
        if folder not in self._dirs:
            os.makedirs(folder, exist_ok=True)
            self._dirs.add(folder)
        path = write_new(folder, "part-00000-", "-c000.snappy.parquet", memoryview(encoded))
        add = {
            "path": f"{rel}/{os.path.basename(path)}",
            "partitionValues": {"partition": str(partition), "segment": str(segment)},
            "size": encoded.size,
            "modificationTime": now,
            "dataChange": data_change,
            "stats": orjson.dumps(stats).decode(),
        }
        return {"add": add}

    # ------------------------------------------------------------------ log entries

    def stale(self) -> bool:
        """Whether a checkpoint newer than :attr:`version` exists: log entries after ``version`` may then
        have been cleaned up, so a link at ``version + 1`` could succeed on a table that moved on. The
        caller must refresh before committing. Cleanup never deletes entries newer than the latest
        checkpoint, so while this is False every taken version still has its entry."""
        try:
            with open(os.path.join(self.log_dir, "_last_checkpoint"), "rb") as fh:
                checkpoint = int(orjson.loads(fh.read())["version"])
        except (FileNotFoundError, KeyError, ValueError, orjson.JSONDecodeError):
            return False
        return checkpoint > self.version

    def commit(self, actions: Sequence[Mapping[str, object]]) -> int:
        """Write ``actions`` as the log entry of ``version + 1`` and return that version.

        Raises:
            LostRace: the version exists; :attr:`version` has moved past the winners, so calling again
                tries the next free version.
        """
        target = self.version + 1
        body = b"".join(orjson.dumps(a) + b"\n" for a in actions)
        tmp = write_new(self.log_dir, "_commit_", ".json.tmp", body)
        try:
            os.link(tmp, self.entry(target))
        except FileExistsError:
            raise LostRace(self._read_winners(target)) from None
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
            raise LostRace(self._read_winners(target)) from None
        finally:
            os.unlink(tmp)
        self.version = target
        self._record(target, body)
        return target

    def entry(self, version: int) -> str:
        return os.path.join(self.log_dir, f"{version:020d}.json")

    def _record(self, version: int, body: bytes) -> None:
        """Keep the log entry of ``version`` for :meth:`take_entry`."""
        with self._entries_lock:
            self._entries[version] = body
            if len(self._entries) > ENTRIES_KEPT:
                del self._entries[next(iter(self._entries))]

    def take_entry(self, version: int) -> bytes | None:
        """The log entry of ``version`` if this appender wrote or read it (once: it is forgotten then,
        with every older one); None: read it from the disk (:mod:`.local_state`)."""
        with self._entries_lock:
            body = self._entries.pop(version, None)
            if self._entries and next(iter(self._entries)) < version:
                for old in [v for v in self._entries if v < version]:
                    del self._entries[old]
        return body

    def _read_winners(self, first: int) -> Winners:
        winners = Winners()
        version = first
        while True:
            try:
                with open(self.entry(version), "rb") as fh:
                    raw = fh.read()
            except FileNotFoundError:
                break
            winners.add_entry(version, raw)
            self._record(version, raw)
            version += 1
        self.version = max(self.version, version - 1)
        return winners


def commit_info(
    operation_metrics: dict[str, str], custom: dict[str, str], compaction: bool = False
) -> dict[str, object]:
    """The ``commitInfo`` action of a topic append, or of a compaction (Spark's names and metrics as
    strings; a compaction is recorded as Delta's OPTIMIZE)."""
    if compaction:
        operation, parameters = "OPTIMIZE", {"predicate": "[]", "zOrderBy": "[]"}
    else:
        operation, parameters = "WRITE", {"mode": "Append", "partitionBy": PARTITIONS_JSON}
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": parameters,
            "isBlindAppend": not compaction,
            "operationMetrics": operation_metrics,
            "engineInfo": ENGINE,
            "clientVersion": ENGINE,
            **custom,
        }
    }


def added_bytes(adds: Sequence[Mapping[str, Mapping[str, object]]]) -> int:
    """The bytes of the data files that ``add`` actions add."""
    return sum(int(str(a["add"]["size"])) for a in adds)


def remove_action(path: str, partition: int, segment: int, size: int) -> dict[str, object]:
    """The ``remove`` of a data file a compaction rewrote (no data change: the records stay)."""
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": int(time.time() * 1000),
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": {"partition": str(partition), "segment": str(segment)},
            "size": size,
        }
    }


def txn_action(app_id: str, version: int, last_updated_ms: int) -> dict[str, object]:
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": last_updated_ms}}


def file_stats(rows: pa.Table) -> dict[str, object]:
    """Delta file statistics of ``rows`` as delta-rs writes them."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in STATS_COLUMNS:
        _column_stats(name, rows[name], mins, maxs, nulls)
    return {"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def _column_stats(
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


def groups_stats(groups: list[pa.Table]) -> list[dict[str, object]]:
    """:func:`file_stats` of each of ``groups`` (a commit's rows split by partition), the integer
    columns of all groups at once (numpy's ``reduceat``): a commit over many partitions writes a file per
    partition, and per-file statistics were a tenth of its time."""
    if len(groups) == 1 or not all(g.num_rows for g in groups):
        return [file_stats(g) for g in groups]
    starts = np.concatenate(([0], np.cumsum([g.num_rows for g in groups])[:-1]))
    joined = pa.concat_tables(groups).combine_chunks()
    mins: list[dict[str, object]] = [{} for _ in groups]
    maxs: list[dict[str, object]] = [{} for _ in groups]
    nulls: list[dict[str, int]] = [{} for _ in groups]
    for name in STATS_COLUMNS:
        column = joined[name]
        if name not in _NUMERIC_STATS and _same_in_all(name, column, mins, maxs, nulls):
            continue
        if name not in _NUMERIC_STATS or column.null_count or column.num_chunks != 1:
            for i, g in enumerate(groups):  # the general way, group by group
                _column_stats(name, g[name], mins[i], maxs[i], nulls[i])
            continue
        values = _integers(column)
        lows, highs = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
        for i in range(len(groups)):
            nulls[i][name] = 0
            low, high = int(lows[i]), int(highs[i])
            mins[i][name], maxs[i][name] = (
                (_iso_ms(low), _iso_ms(high)) if name == "timestamp" else (low, high)
            )
    return [
        {"numRecords": g.num_rows, "minValues": mins[i], "maxValues": maxs[i], "nullCount": nulls[i]}
        for i, g in enumerate(groups)
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


def encode(rows: pa.Table) -> pa.Buffer:
    """``rows`` as a Parquet file in memory (the partition columns are the file's folder).

    A small file (an append's few records per partition; compaction merges it within seconds) is
    written without dictionaries and with Parquet statistics of the offset and timestamp only: 20-25 %
    less CPU a file (200 against 260 us for a few records), and a commit over many partitions writes a
    file each. Its nullable columns that hold only nulls (headers and the producer fields of plain
    records, the key of unkeyed ones) are left out: a file costs pyarrow 10-45 us a column whatever its
    rows, 200 against 110 us for a few plain records. Delta readers read a column a file lacks as
    nulls (as after an added column; delta-rs, Spark and :func:`.file_index.file_table` do). Delta's own
    statistics (the ``add`` action's) are unchanged."""
    sink = pa.BufferOutputStream()
    data = rows.drop_columns(["partition", "segment"])
    if rows.num_rows < SMALL_FILE_ROWS:
        if rows.num_rows:
            nulls = [f.name for f in data.schema if f.nullable and data[f.name].null_count == rows.num_rows]
            data = data.drop_columns(nulls)
        pq.write_table(data, sink, compression="snappy", use_dictionary=False, write_statistics=_PAGE_STATS)
    else:
        pq.write_table(data, sink, compression="snappy")
    return sink.getvalue()


def _iso_ms(micros: int) -> str:
    """A timestamp statistic: UTC, truncated to the millisecond (as delta-rs and Spark write them)."""
    millis = micros // 1000
    return f"{_iso_second(millis // 1000)}.{millis % 1000:03d}Z"


@functools.lru_cache(maxsize=256)  # a commit's timestamps fall in the same few seconds
def _iso_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _groups(data: pa.Table) -> list[tuple[tuple[int, int], pa.Table]]:
    """``data`` split by (partition, segment), in first-seen order (numpy: an Acero group-by and a
    filter per group cost more than the Parquet encoding of a small commit). Many groups (a commit over
    many partitions) cost one stable sort and one ``take``; each group is then a zero-copy slice."""
    parts = data["partition"].to_numpy()
    segs = data["segment"].to_numpy()
    if (parts == parts[0]).all() and (segs == segs[0]).all():
        return [((int(parts[0]), int(segs[0])), data)]
    keys = parts.astype(np.int64) << 40 | segs.astype(np.int64)
    uniq, first = np.unique(keys, return_index=True)
    order = np.argsort(first)  # the groups in first-seen order
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    group_of_row = rank[np.searchsorted(uniq, keys)]
    by_group = np.argsort(group_of_row, kind="stable")  # rows keep their order within a group
    grouped = data.take(pa.array(by_group)).combine_chunks()
    counts = np.bincount(group_of_row, minlength=len(uniq))
    out = []
    start = 0
    for g, count in enumerate(counts):
        key = int(uniq[order[g]])
        out.append(((key >> 40, key & ((1 << 40) - 1)), grouped.slice(start, int(count))))
        start += int(count)
    return out
