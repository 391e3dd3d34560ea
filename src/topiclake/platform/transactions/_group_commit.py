"""Group commit of ``_system/transactions`` rows: concurrent callers' rows share one Delta commit.

Every acknowledged transactional request (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, a Produce
batch) is durable in the table before its answer, so a Delta commit per request would bound a producer to
one batch per commit. Instead the first caller to find no commit running writes everything queued by then;
the callers that queued meanwhile wait for it (or, when it did not include them, one of them writes next).
"""

from __future__ import annotations

import threading
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
    """

    def __init__(self, write: Callable[[list[T]], None]) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._queue: list[_Entry[T]] = []
        self._busy = False

    def submit(self, items: Sequence[T]) -> None:
        """Return once ``items`` are written (in one commit, perhaps with other callers' items).

        Raises:
            BaseException: What ``write`` raised for the commit holding ``items``.
        """
        entry: _Entry[T] = _Entry(items)
        with self._cond:
            self._queue.append(entry)
            while self._busy and not entry.done:
                self._cond.wait()
            if not entry.done:
                self._busy = True
                taken, self._queue = self._queue, []
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
