"""Read-ahead for consumers of history: a partition's next answer, read and encoded while the client
digests this one.

A consumer of one partition has one fetch in flight: the broker reads and encodes while the client waits,
and then the client parses while the broker idles. When a fetch answer was cut by its byte limit and
more records are committed after it, the broker starts the fetch the consumer will send next (same
partition, the offset after the answer, same limit) on a thread of its own; the next fetch takes that
answer when the key matches, and waits for it if it is still being read (it is the read it would do
anyway). Committed records never change, so an answer read ahead is as right as one read on request; its
high watermark and log start may be a few milliseconds old, which a client treats as any other answer.

Bounded: at most :data:`MAX_ENTRIES` answers (LRU), only for limits up to :data:`MAX_LIMIT_BYTES`, on
:data:`THREADS` threads; an answer nobody asks for is dropped as newer ones come.
"""

from __future__ import annotations

import contextvars
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

#: Answers kept at most (each at most a partition's byte limit).
MAX_ENTRIES = 8
#: Fetches of a partition limit above this are not read ahead (the memory of one kept answer).
MAX_LIMIT_BYTES = 4 * 1024 * 1024
#: Threads that read ahead.
THREADS = 2

#: The listener's ReadAhead in its Context.state.
READ_AHEAD = "fetch_read_ahead"
#: (topic, partition, fetch offset, byte limit): what the fetch read ahead will ask.
Key = tuple[str, int, int, int]


@dataclass(frozen=True)
class Answer:
    """One partition's part of a Fetch answer, read and encoded."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    #: Encoded bytes per Arrow byte of what was encoded (the fetch's next byte request scales by it).
    ratio: float | None
    #: The offset after the last record of ``data``.
    next_offset: int


class ReadAhead:
    """Answers being read ahead, by the key of the fetch that will ask for them. Thread-safe."""

    def __init__(self, max_entries: int = MAX_ENTRIES, threads: int = THREADS) -> None:
        self._max_entries = max_entries
        self._pending: OrderedDict[Key, Future[Answer]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kafka-ahead")
        self.hits = 0
        self.started = 0

    def take(self, key: Key) -> Answer | None:
        """The answer read ahead for ``key`` (waiting for it if still being read), or None."""
        with self._lock:
            future = self._pending.pop(key, None)
        if future is None:
            return None
        try:
            answer = future.result()
        except Exception:  # the fetch on request reads again and answers the error itself
            return None
        with self._lock:
            self.hits += 1
        return answer

    def start(self, key: Key, read: Callable[[], Answer]) -> None:
        """Read ``key``'s answer ahead with ``read`` (in the caller's context: its client principal)."""
        if key[3] > MAX_LIMIT_BYTES:
            return
        with self._lock:
            if key in self._pending:
                return
            try:
                future = self._pool.submit(contextvars.copy_context().run, read)
            except RuntimeError:  # shut down: the listener is closing
                return
            self._pending[key] = future
            self.started += 1
            while len(self._pending) > self._max_entries:
                _, dropped = self._pending.popitem(last=False)
                dropped.cancel()

    def close(self) -> None:
        """Drop every answer and stop the threads."""
        with self._lock:
            self._pending.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
