"""Decoded small data files, kept for fetches that read history (one cache per broker, bounded in bytes).

Reading a Parquet file costs ~0.2-0.3 ms here however small it is, so a fetch of 1,000 records from 1,000
one-record files (a partition that maintenance has not compacted yet, or with maintenance off) takes
~230-300 ms, while the records themselves are a few hundred kilobytes. A data file never changes once
written (a compaction writes a new path), so a decoded small file can be kept by path and needs no
invalidation; what vacuum deletes simply ages out. Files above ``max_file_bytes`` are not kept: one big
file is read at Parquet's own speed and would crowd out many small ones. The tail cache
(:mod:`.tail_cache`) serves the newest records; this one serves re-reads of older ones (several consumer
groups catching up, a consumer rewinding).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

#: Files at most this big on disk are kept decoded.
MAX_FILE_BYTES = 256 * 1024


class SmallFileCache:
    """An LRU of decoded data files by path, bounded by the decoded tables' bytes (0: off)."""

    def __init__(self, max_bytes: int, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_file_bytes = max_file_bytes
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def keeps(self, size_bytes: int) -> bool:
        """Whether a file of this size on disk is worth keeping."""
        return self.max_bytes > 0 and size_bytes <= self.max_file_bytes

    def get(self, path: str) -> pa.Table | None:
        with self._lock:
            table = self._tables.get(path)
            if table is None:
                self.misses += 1
                return None
            self._tables.move_to_end(path)
            self.hits += 1
            return table

    def put(self, path: str, table: pa.Table) -> None:
        size = table.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._tables.pop(path, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._tables[path] = table
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._tables.popitem(last=False)
                self._bytes -= evicted.nbytes

    @property
    def nbytes(self) -> int:
        return self._bytes
