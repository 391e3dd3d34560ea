"""Sequential reads of big data files: a fetch goes on where the previous fetch of that file stopped.

A compacted file (up to ``compact_target_bytes``, one Parquet row group) read from an offset was decoded
whole, for every fetch: a consumer reading it in 1 MiB fetches decoded it once a fetch (~15 us a record
for 300,000 records, and quadratic in the file's size). A cursor streams the file in record batches
(buffered, not pre-buffered: its memory is a batch, the rows it last returned and the read buffer) and is
parked after each fetch, where the consumer's next fetch finds it: at the offset after the rows it
returned, or inside them (a Kafka fetch may answer fewer than it read). A fetch from anywhere else opens
a cursor of its own and decodes its way to its offset once. Cursors are few (LRU by count). Small files
are not read here: :mod:`.file_cache` keeps them decoded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from topiclake.platform.log.file_index import DataFile, with_partition
from topiclake.schemas import TOPIC_SCHEMA

#: Rows decoded at a time.
BATCH_ROWS = 8192
#: Bytes read from the file at a time.
READ_BUFFER = 1 << 20


class _Cursor:
    """An open file, the rows decoded but not yet returned, and the offset they start at."""

    def __init__(self, fs: pafs.FileSystem, f: DataFile) -> None:
        self.file = f
        self._reader = pq.ParquetFile(fs.open_input_file(f.path), buffer_size=READ_BUFFER, pre_buffer=False)
        names = [n for n in self._reader.schema_arrow.names if n in TOPIC_SCHEMA.names]
        self._batches: Iterator[pa.RecordBatch] = self._reader.iter_batches(
            batch_size=BATCH_ROWS, columns=names, use_threads=False
        )
        self._pending: pa.Table | None = None
        self._served: pa.Table | None = None  # what the last read returned: a fetch cut short reads it again
        self._last = -1  # offsets must ascend through the file; a file that does not is read elsewhere
        self.sorted = True

    def _next(self) -> pa.Table | None:
        if self._pending is not None and self._pending.num_rows:
            piece, self._pending = self._pending, None
            return piece
        batch = next(self._batches, None)
        if batch is None:
            return None
        n = batch.num_rows
        table = with_partition(pa.Table.from_batches([batch]), self.file)
        offsets = table["offset"]
        if n and (
            offsets[0].as_py() <= self._last
            or (n > 1 and not pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py())
        ):
            self.sorted = False
            return None
        if n:
            self._last = int(offsets[-1].as_py())
        return table

    def read(self, offset: int, max_records: int, max_bytes: int) -> pa.Table | None:
        """Rows from ``offset`` on: at least one when the file has one, else within both limits."""
        served, self._served = self._served, None
        if served is not None and served.num_rows and int(served["offset"][-1].as_py()) >= offset:
            pieces = [served] if self._pending is None else [served, self._pending]
            self._pending = pa.concat_tables(pieces)
        out: list[pa.Table] = []
        count = size = 0
        while count < max_records and size < max_bytes:
            piece = self._next()
            if piece is None:
                break
            if int(piece["offset"][-1].as_py()) < offset:
                continue
            if int(piece["offset"][0].as_py()) < offset:
                skip = int(pc.sum(pc.less(piece["offset"], offset)).as_py())
                piece = piece.slice(skip)
            take = min(piece.num_rows, max_records - count)
            nbytes = piece.nbytes
            if size + nbytes > max_bytes:
                per_row = max(nbytes // piece.num_rows, 1)
                take = min(take, max((max_bytes - size) // per_row, 0 if out else 1))
            if take < piece.num_rows:
                self._pending = piece.slice(take)
                piece = piece.slice(0, take)
            if piece.num_rows:
                out.append(piece)
                count += piece.num_rows
                size += piece.nbytes
            if self._pending is not None:
                break
        if not self.sorted:
            return None
        self._served = pa.concat_tables(out) if out else None
        return self._served

    def position(self) -> int:
        """The first offset the next read returns (rows below it are not decoded again)."""
        if self._pending is not None and self._pending.num_rows:
            return int(self._pending["offset"][0].as_py())
        return self._last + 1

    def covers(self, offset: int) -> bool:
        """Whether a read from ``offset`` can go on here: at the position, or inside the last read."""
        served = self._served
        if served is not None and served.num_rows:
            return int(served["offset"][0].as_py()) <= offset <= self.position()
        return offset == self.position()


class FileCursors:
    """Open cursors of one topic's big files, most recently used last; thread-safe."""

    def __init__(self, max_cursors: int = 8) -> None:
        self._max = max_cursors
        self._parked: OrderedDict[int, _Cursor] = OrderedDict()
        self._lock = threading.Lock()

    def _take(self, path: str, offset: int) -> _Cursor | None:
        with self._lock:
            for key, cursor in self._parked.items():
                if cursor.file.path == path and cursor.covers(offset):
                    del self._parked[key]
                    return cursor
        return None

    def read(
        self, fs: pafs.FileSystem, f: DataFile, offset: int, max_records: int, max_bytes: int
    ) -> pa.Table | None:
        """Rows of ``f`` from ``offset`` on (None when the file is not ordered by offset).

        Raises:
            FileNotFoundError: The file is gone (compacted and vacuumed).
        """
        cursor = self._take(f.path, offset)
        rows = None
        if cursor is not None:
            try:
                rows = cursor.read(offset, max_records, max_bytes)
            except OSError:  # the file went away under a parked cursor (vacuumed from an object store)
                cursor = None
        if cursor is None:
            cursor = _Cursor(fs, f)
            rows = cursor.read(offset, max_records, max_bytes)
        if rows is None:
            return None
        with self._lock:  # parked even at the file's end: a fetch cut short comes back for the rest
            self._parked[id(cursor)] = cursor
            while len(self._parked) > self._max:
                self._parked.popitem(last=False)
        return rows
