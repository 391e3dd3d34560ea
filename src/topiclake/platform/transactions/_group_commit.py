"""Group commit of ``_system/transactions`` rows: concurrent callers' rows share one Delta commit.

Every acknowledged transactional request (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, a Produce
batch) is durable in the table before its answer, so a Delta commit per request would bound a producer to
one batch per commit. Instead the first caller to find no commit running writes everything queued by then;
the callers that queued meanwhile wait for it (or, when it did not include them, one of them writes next).

A writer that finds fewer callers queued than the previous commit carried lingers up to ``linger_s`` for
the rest: a producer's pipelined requests are answered together by a commit and come back together, and
without the wait the first of them would take a commit of its own, the others the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    items: Sequence[T]
    done: bool = False
    error: BaseException | None = None


class GroupCommit(Generic[T]):
    """Calls ``write`` with the items of every caller waiting at the time, one call at a time.

    Args:
        write: Writes items in one commit; raises when nothing of it was written (every caller of that
            commit then gets the error).
        linger_s: How long a writer waits for as many callers as the previous commit carried.
    """

    def __init__(self, write: Callable[[list[T]], None], linger_s: float = 0.001) -> None:
        self._write = write
        self._linger_s = linger_s
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # callers waiting for a commit
        self._more = threading.Condition(lock)  # a writer lingering for callers
        self._queue: list[_Entry[T]] = []
        self._busy = False
        self._lingering = False
        self._last = 1  # callers in the previous commit

    def submit(self, items: Sequence[T]) -> None:
        """Return once ``items`` are written (in one commit, perhaps with other callers' items).

        Raises:
            BaseException: What ``write`` raised for the commit holding ``items``.
        """
        entry: _Entry[T] = _Entry(items)
        with self._cond:
            self._queue.append(entry)
            if self._lingering:
                self._more.notify()
            while self._busy and not entry.done:
                self._cond.wait()
            if not entry.done:
                self._busy = True
                deadline = time.monotonic() + self._linger_s
                self._lingering = True
                while len(self._queue) < self._last and (left := deadline - time.monotonic()) > 0:
                    self._more.wait(left)
                self._lingering = False
                taken, self._queue = self._queue, []
                self._last = len(taken)
        if entry.done:
            if entry.error is not None:
                raise entry.error
            return
        error: BaseException | None = None
        try:
            self._write([item for e in taken for item in e.items])
        except BaseException as exc:  # handed to every caller of this commit, then raised here
            error = exc
        with self._cond:
            for e in taken:
                e.done, e.error = True, error
            self._busy = False
            self._cond.notify_all()
        if error is not None:
            raise error
