"""A topic log's read side: the file index, offsets, fetch (with long-poll) and time lookups.

Split from :mod:`.topic_log`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from topiclake.errors import OffsetOutOfRange, StorageError
from topiclake.platform.log._base import FOREIGN_ERRORS, LogBase
from topiclake.platform.log.file_cursors import FileCursors
from topiclake.platform.log.file_index import DataFile, FileIndex, build_index, read_file, read_files
from topiclake.platform.log.tail_cache import UNBOUNDED, bounded_concat
from topiclake.platform.records import FetchResult
from topiclake.schemas import TOPIC_SCHEMA

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log
#: A read that reached the end of a big file goes on into the next files if at least this much of its
#: byte limit is left (less is not worth a file's open).
_READ_ON_MIN_BYTES = 64 * 1024
_READ_ON_FILES = 8
#: Fewest Arrow bytes a row of the topic table takes (offset, timestamp, the value's offsets, the topic
#: and partition columns...): a window of files holding max_bytes / this many records is enough.
_MIN_ROW_BYTES = 48


class LogReads(LogBase):
    """Read committed records."""

    _file_cursors: FileCursors | None = None  # made on the first read of a big file

    @property
    def _cursors(self) -> FileCursors:
        with self._index_lock:
            if self._file_cursors is None:
                self._file_cursors = FileCursors()
            return self._file_cursors

    # ------------------------------------------------------------------ read

    def _refresh_index(self, force: bool = False, min_version: int | None = None) -> FileIndex:
        with self._index_lock:
            index = self._index
            if force or index is None or (min_version is not None and index.version < min_version):
                self._index = index = self._build_index()
            return index

    def _build_index(self) -> FileIndex:
        for attempt in range(3):
            try:
                reader = DeltaTable(self.uri, storage_options=self._storage.options())
                return build_index(reader, self._fs)
            except FOREIGN_ERRORS as exc:
                # a checkpoint or log entry cleaned up while the table was being opened: open it again
                if attempt == 2 or "not found" not in str(exc).lower():
                    message = f"cannot index topic table {self.uri}: {exc}"
                    raise StorageError(message, topic=self.topic) from exc
        raise AssertionError("unreachable")

    def high_watermark(self, partition: int) -> int:
        """The end offset: one past the last committed record."""
        return self._partition(partition).high_watermark

    def producers(self, partition: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of the idempotent producers of ``partition`` this broker
        has seen since it opened the log (Kafka's DescribeProducers); ``partition`` must exist."""
        self._partition(partition)
        with self._lock:
            return self._producers.active(partition)

    def log_start_offset(self, partition: int) -> int:
        """The first offset still in the log (advanced by retention and deletion only)."""
        part = self._partition(partition)
        index = self._refresh_index()
        start = index.log_start_offset(partition)
        if start is None and part.high_watermark > 0:
            index = self._refresh_index(min_version=self.known_version())
            start = index.log_start_offset(partition)
        return start if start is not None else part.high_watermark

    def read_tail(
        self, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> tuple[pa.Table, int] | None:
        """Committed records from ``offset`` on and the high watermark, if the in-memory tail holds them:
        no I/O, no waiting (an event loop may call it). None: the tail cannot answer (``offset`` is not
        in it or beyond the end, or another broker leads the partition); :meth:`fetch` can.

        Raises:
            PartitionNotFound: the topic has no such partition.
        """
        part = self._partition(partition)
        hwm = part.high_watermark
        if not self.leads(partition) or not 0 <= offset < hwm:
            return None
        # the tail takes a commit's records just before the high watermark moves past them
        records = part.tail.read(offset, min(max_records, hwm - offset), max_bytes)
        return None if records is None else (records, hwm)

    def watch(self, partition: int, offset: int, wake: Callable[[], None]) -> bool:
        """Have ``wake`` called once, from the flusher, when the partition's high watermark next moves
        (or the log closes or hands the partition over): a long poll without a thread. Returns False,
        registering nothing, when the end is already past ``offset``."""
        part = self._partition(partition)
        with part.cond:
            if part.high_watermark > offset:
                return False
            part.watchers.append(wake)
        return True

    def unwatch(self, partition: int, wake: Callable[[], None]) -> None:
        """Drop ``wake`` if :meth:`watch` registered it and it has not been called."""
        part = self._parts.get(partition)
        if part is None:
            return
        with part.cond:
            if wake in part.watchers:
                part.watchers.remove(wake)

    def fetch(
        self, partition: int, offset: int, max_records: int, max_bytes: int, wait_ms: float = 0
    ) -> FetchResult:
        """Committed records of a partition from ``offset`` on.

        Long-polls up to ``wait_ms`` when ``offset`` is the end of the log. Returns at least one record
        when there is one, even if it is larger than ``max_bytes``.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or beyond the end.
        """
        part = self._partition(partition)
        self._require_leader(partition)
        if wait_ms > 0 and offset >= part.high_watermark:
            deadline = time.monotonic() + wait_ms / 1000
            with part.cond:
                while part.high_watermark <= offset and not self._closing:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    part.cond.wait(remaining)
        hwm = part.high_watermark
        records = part.tail.read(offset, max_records, max_bytes) if 0 <= offset < hwm else None
        start = self.log_start_offset(partition)
        if records is None and (offset < start or offset > hwm):
            raise OffsetOutOfRange(
                f"offset {offset} is out of range [{start}, {hwm}] for {self.topic}-{partition}",
                topic=self.topic,
                partition=partition,
                offset=offset,
                log_start_offset=start,
                high_watermark=hwm,
            )
        if records is None and offset < hwm:
            records = self._read_table(partition, offset, max_records, max_bytes, hwm)
        if records is None:
            records = TOPIC_SCHEMA.empty_table()
        elif records.num_rows and int(records["offset"][-1].as_py()) >= hwm:  # ordered: one look suffices
            records = records.filter(pc.less(records["offset"], hwm))
        next_offset = int(records["offset"][-1].as_py()) + 1 if records.num_rows else offset
        return FetchResult(self.topic, partition, records, hwm, start, next_offset)

    def _read_table(
        self, partition: int, offset: int, max_records: int, max_bytes: int, hwm: int
    ) -> pa.Table | None:
        for attempt in range(2):
            index = self._refresh_index(force=attempt > 0)
            end = index.end_offset(partition)
            if end is None or end <= offset:
                index = self._refresh_index(min_version=self.known_version())
            try:
                return self._read_window(index.files_from(partition, offset), offset, max_records, max_bytes)
            except FileNotFoundError:  # files compacted and vacuumed under a stale index
                logger.info("topic %s partition %d: index stale, rebuilding", self.topic, partition)
        return None

    def _read_window(
        self, candidates: list[DataFile], offset: int, max_records: int, max_bytes: int, go_on: bool = True
    ) -> pa.Table | None:
        """Records from ``offset`` on, read from the files that can hold the next ``max_records`` offsets.

        Every record below the window's end lives in a file whose first offset is below it, so the window
        is complete even when files overlap; a window that holds nothing (a gap left by key compaction)
        moves on to the next file.
        """
        start = offset
        cache = self._file_cache
        if candidates and (cache is None or not cache.keeps(candidates[0].size_bytes)):
            first = candidates[0]  # a big file no other overlaps: read on from where the last fetch stopped
            if all(f.min_offset > first.max_offset for f in candidates[1:]):
                rows = self._cursors.read(self._fs, first, start, max_records, max_bytes)
                if rows is not None:
                    return self._read_on(rows, first, candidates[1:], max_records, max_bytes)
        cached = self._read_cached(candidates, start, max_records, max_bytes)
        if cached is not None:
            return self._cached_then_read(cached, candidates, max_records, max_bytes) if go_on else cached
        while candidates:
            window_end = start + max_records
            wanted = [f for f in candidates if f.min_offset < window_end]
            size = records = 0
            for i, f in enumerate(wanted):  # byte guard: compressed size overstates small files, so loose
                size += f.size_bytes
                records += f.num_records  # and records: well compressed values understate them
                full = size >= 4 * max_bytes + 64 * 1024 or records >= max_bytes // _MIN_ROW_BYTES
                if full and i + 1 < len(wanted):
                    window_end = wanted[i + 1].min_offset
                    wanted = wanted[: i + 1]
                    break
            table = read_files(self._fs, wanted, start, self._file_cache)
            if table.num_rows and int(pc.max(table["offset"]).as_py()) >= window_end:  # a copy: when needed
                table = table.filter(pc.less(table["offset"], window_end))
            if table.num_rows:
                return bounded_concat([table], max_records, max_bytes)
            later = [f for f in candidates if f.min_offset >= window_end]
            if not later:
                return None
            start = min(f.min_offset for f in later)
            candidates = later
        return None

    def _cached_then_read(
        self, cached: pa.Table, candidates: list[DataFile], max_records: int, max_bytes: int
    ) -> pa.Table:
        """``cached`` (records of cached files in a row) and, when it stopped at a file the cache does
        not hold before the limits, that file's window read after it: a fetch that found the end of the
        previous fetch's window in the cache is not answered with that remainder alone."""
        n, size = cached.num_rows, cached.nbytes
        if not n or n >= max_records or size + _READ_ON_MIN_BYTES > max_bytes:
            return cached
        last = int(cached["offset"][-1].as_py())
        later = [f for f in candidates if f.max_offset > last]
        if not later or any(f.min_offset <= last for f in later):
            return cached  # the end, or a file overlapping what was read: the next fetch goes on
        more = self._read_window(later, last + 1, max_records - n, max_bytes - size, go_on=False)
        return cached if more is None or not more.num_rows else pa.concat_tables([cached, more])

    def _read_on(
        self, rows: pa.Table, file: DataFile, later: list[DataFile], max_records: int, max_bytes: int
    ) -> pa.Table:
        """``rows`` read from ``file`` and, when they reach its end, the next big files' records up to
        the limits (at most :data:`_READ_ON_FILES` files in all).

        A cursor reads one file; without this, a fetch that reached a file's end answered its last few
        records alone, and a partition of files of a few MiB took a third more fetches.
        """
        pieces = [rows]
        n, size = rows.num_rows, rows.nbytes
        cache = self._file_cache
        for k, f in enumerate(later[: _READ_ON_FILES - 1]):
            if not pieces[-1].num_rows or int(pieces[-1]["offset"][-1].as_py()) < file.max_offset:
                break  # the last file read is not exhausted: the limits stopped it
            if n >= max_records or size + _READ_ON_MIN_BYTES > max_bytes:
                break
            if cache is not None and cache.keeps(f.size_bytes):
                break  # small files: the next fetch reads them from the cache, many at a time
            if k + 1 < len(later) and later[k + 1].min_offset <= f.max_offset:
                break  # overlapped by a later file: the general path reads such windows
            more = self._cursors.read(self._fs, f, file.max_offset + 1, max_records - n, max_bytes - size)
            if more is None or not more.num_rows:
                break
            file = f
            pieces.append(more)
            n += more.num_rows
            size += more.nbytes
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def _read_cached(
        self, candidates: list[DataFile], start: int, max_records: int, max_bytes: int
    ) -> pa.Table | None:
        """Records from ``start`` on out of small files already decoded in the cache, in a row.

        Slices of the cached tables, up to the limits, with nothing copied; None when the first file is
        not cached or files overlap (the general path reads them, and caches them for the next fetch).
        """
        cache = self._file_cache
        pieces: list[pa.Table] = []
        count = size = 0
        previous_max = -1
        for f in candidates:
            if pieces and f.min_offset <= previous_max:
                return None
            table = cache.get(f.path) if cache is not None and cache.keeps(f.size_bytes) else None
            if table is None or count >= max_records or size >= max_bytes:
                break
            if f.min_offset < start:
                table = table.slice(int(pc.sum(pc.less(table["offset"], start)).as_py() or 0))
            if table.num_rows:
                pieces.append(table)
                count += table.num_rows
                size += table.nbytes
            previous_max = f.max_offset
        return bounded_concat(pieces, max_records, max_bytes) if pieces else None

    def held_records(self, inside: list[DataFile], lo: int, hi: int) -> pa.Table | None:
        """The records of the files ``inside`` (one partition and segment, offsets ``lo``..``hi``) from
        the partition's tail cache, sorted by offset; None unless it holds every one of them. For
        compaction on object storage, which then reads no small file back (:mod:`._object_compaction`)."""
        if not inside:
            return None
        part = self._parts.get(inside[0].partition)
        if part is None:
            return None
        n = hi - lo + 1
        if n <= 0 or sum(f.num_records for f in inside) != n:
            return None  # the files do not cover their range exactly
        # the tail's offsets are contiguous: its records lo..hi are a slice, no filter needed (four
        # compute calls a run were a third of compaction's time on 12 partitions)
        rows = part.tail.read(lo, n, UNBOUNDED)
        if rows is None or rows.num_rows != n:
            return None
        offsets, segments = rows["offset"], rows["segment"]
        if offsets[0].as_py() != lo or offsets[-1].as_py() != hi:
            return None  # the tail starts inside the first file (or the files are not what it holds)
        if segments[0].as_py() != inside[0].segment or segments[-1].as_py() != inside[0].segment:
            return None
        return rows

    def held_newest(self, inside: list[DataFile], lo: int, hi: int) -> tuple[list[DataFile], pa.Table] | None:
        """The records of the newest of the files ``inside`` (one partition and segment, offsets
        ``lo``..``hi``) that the partition's tail cache holds whole, and the older files it does not hold
        (empty: all held, as :meth:`held_records`); None when it holds none of them. On object storage a
        compaction run that the tail holds only in part then GETs the older files alone."""
        if not inside:
            return None
        part = self._parts.get(inside[0].partition)
        start = part.tail.start_offset() if part is not None else None
        if start is None:
            return None
        files = sorted(inside, key=lambda f: f.min_offset)
        for k, f in enumerate(files):
            if f.min_offset >= start:
                rows = self.held_records(files[k:], lo if k == 0 else f.min_offset, hi)
                return None if rows is None else (files[:k], rows)
        return None

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= ``timestamp_ms``, or None if there is none."""
        self._partition(partition)
        target_us = timestamp_ms * 1000
        index = self._refresh_index(min_version=self.known_version())
        for f in index.files(partition):
            if f.max_timestamp_us is not None and f.max_timestamp_us < target_us:
                continue
            table = read_file(self._fs, f)
            hit = table.filter(pc.greater_equal(pc.cast(table["timestamp"], pa.int64()), target_us))
            if hit.num_rows:
                return int(pc.min(hit["offset"]).as_py())
        return None
