"""A bound on the bytes a broker has accepted but not yet committed."""

from __future__ import annotations

import threading

from topiclake.errors import Throttled


class MemoryBudget:
    """Counts accepted-but-uncommitted bytes; refuses more than ``max_bytes`` with :class:`Throttled`.

    A single request larger than the whole budget is still let through when nothing else is pending,
    so no request is refused forever.
    """

    def __init__(self, max_bytes: int, retry_after_ms: int = 100) -> None:
        self.max_bytes = max_bytes
        self.retry_after_ms = retry_after_ms
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes currently held."""
        return self._used

    def acquire(self, nbytes: int, topic: str | None = None) -> None:
        """Take ``nbytes`` or raise :class:`Throttled` (retriable) without taking anything."""
        with self._lock:
            if self._used > 0 and self._used + nbytes > self.max_bytes:
                raise Throttled(
                    f"broker buffers are full ({self._used} of {self.max_bytes} bytes pending); "
                    f"retry after {self.retry_after_ms} ms",
                    retry_after_ms=self.retry_after_ms,
                    topic=topic,
                )
            self._used += nbytes

    def release(self, nbytes: int) -> None:
        """Give back bytes once they are committed or failed."""
        with self._lock:
            self._used = max(self._used - nbytes, 0)
