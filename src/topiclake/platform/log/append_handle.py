"""What one append leaves behind: its handle (where the records went, when they are committed), and the
per-record results a produce request answers from it (:func:`results_of`, shared by every produce path).

Split from :mod:`.topic_log` (the handle) and :mod:`.produce_rows` (the results), which re-export them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from topiclake.errors import RequestTimedOut
from topiclake.platform.log.rows import LazyBatch
from topiclake.platform.records import ProducerInfo, RecordResult


class AppendHandle:
    """The outcome of one append request: where its records went, and when they are committed.

    ``parts`` lists (partition, base offset, count) in the order the request's batches were given;
    :meth:`settle` records the commit's outcome (the first call wins); ``future`` completes with it.
    ``by_sequence`` is set instead for a duplicate whose original was found in the table.

    The future is made only when someone asks for it: acks 0 and 1 never wait, and a
    ``concurrent.futures.Future`` (a condition and a lock) was a tenth of a one-record request's CPU.
    """

    __slots__ = ("_error", "_future", "_settled", "_waiters", "append_time_ms", "by_sequence", "pending")

    def __init__(self) -> None:
        self.pending: list[PendingBatch] = []
        self.by_sequence: dict[int, tuple[int, int, int]] | None = None  # seq -> partition, offset, ts ms
        self.append_time_ms: int | None = None  # stamped on defaulted CreateTimes and on LogAppendTime
        self._future: Future[None] | None = None
        self._settled = False
        self._error: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] | None = None  # see committed()

    @property
    def parts(self) -> list[tuple[int, int, int]]:
        return [(p.partition, p.base_offset, p.count) for p in self.pending]

    @property
    def future(self) -> Future[None]:
        """Completes when the records are committed, or fails with the reason they are not."""
        with _SETTLING:
            if self._future is None:
                self._future = Future()
                if self._settled:
                    _resolve(self._future, self._error)
            return self._future

    def done(self) -> bool:
        return self._settled

    def committed(self) -> asyncio.Future[None]:
        """A future of the running event loop that completes like :attr:`future`, one per caller (a
        retried idempotent request may share its original's handle). Whoever settles the handles of a
        commit wakes each loop once for all of them (:func:`settle_all`), instead of once per request."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with _SETTLING:
            if not self._settled:
                if self._waiters is None:
                    self._waiters = []
                self._waiters.append(waiter)
                return waiter
        _resolve(waiter, self._error)
        return waiter

    def settle(self, error: BaseException | None = None) -> None:
        """Record the outcome: committed (``error`` None) or failed; later calls change nothing."""
        settle_all((self,), error)

    def wait(self, timeout_s: float | None) -> None:
        """Block until committed; raise the commit's error if it failed."""
        self.future.result(timeout=timeout_s)


_SETTLING = threading.Lock()  # one for all handles: held for a few instructions, never contended for long


def settle_all(handles: Iterable[AppendHandle], error: BaseException | None = None) -> None:
    """:meth:`AppendHandle.settle` for many handles, with one wake-up per event loop waiting on them."""
    futures: list[Future[None]] = []
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    with _SETTLING:
        for handle in handles:
            if handle._settled:
                continue
            handle._settled, handle._error = True, error
            if handle._future is not None:
                futures.append(handle._future)
            if handle._waiters:
                for waiter in handle._waiters:
                    by_loop.setdefault(waiter.get_loop(), []).append(waiter)
                handle._waiters = None
    for future in futures:
        _resolve(future, error)
    for loop, waiters in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(_wake, waiters, error)


def _wake(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters:
        if not waiter.done():  # a request that gave up (timeout, disconnect) cancelled its own
            _resolve(waiter, error)


def _resolve(future: Future[None] | asyncio.Future[None], error: BaseException | None) -> None:
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


@dataclass(slots=True, eq=False)
class PendingBatch:
    """Records of one partition queued by an append: offsets assigned, waiting for the flush.

    ``table`` is None until the flush builds it from ``lazy``; the flush builds one table for all the
    batches it commits (:meth:`built_in`), and a batch's own slice of it is cut only if asked for.
    """

    partition: int
    base_offset: int
    _table: pa.Table | None  # see the ``table`` property
    nbytes: int
    handle: AppendHandle
    count: int
    producer_txn: tuple[str, int] | None = None  # (producer txn app id, txn version)
    lazy: LazyBatch | None = None
    _source: tuple[pa.Table, int] | None = None  # (the flush's table, first row) until sliced

    @property
    def table(self) -> pa.Table | None:
        if self._table is None and self._source is not None:
            whole, start = self._source
            self._table = whole.slice(start, self.count)
        return self._table

    @table.setter
    def table(self, table: pa.Table | None) -> None:
        self._table, self._source = table, None

    @property
    def built(self) -> bool:
        return self._table is not None or self._source is not None

    def built_in(self, whole: pa.Table, start: int) -> None:
        """This batch's rows are ``whole[start : start + count]``."""
        self._table, self._source = None, (whole, start)


def whole_table(batches: Sequence[PendingBatch]) -> pa.Table | None:
    """The one table ``batches`` were built in, when they are exactly its rows in order (the common case:
    no slicing, no concatenation); else None."""
    if not batches or batches[0]._source is None:
        return None
    whole = batches[0]._source[0]
    pos = 0
    for pend in batches:
        source = pend._source
        if source is None or source[0] is not whole or source[1] != pos:
            return None
        pos += pend.count
    return whole if pos == whole.num_rows else None


def results_of(
    handle: AppendHandle,
    acks: str,
    targets: list[int],
    batch_rows: list[list[int]],
    stamps: list[int | None],
    producer: ProducerInfo | None,
) -> list[RecordResult]:
    """The results of appended rows, in their order: ``targets`` their partitions, ``batch_rows`` which
    rows each queued batch held, ``stamps`` the CreateTime each was sent with. Shared by every produce
    path, so a retried idempotent request and acks=0 answer alike everywhere."""
    n = len(targets)
    now = handle.append_time_ms  # what the log stored where no CreateTime was sent, and for LogAppendTime
    if acks == "0":
        return [
            RecordResult(t, None, stamps[j] if stamps[j] is not None else now) for j, t in enumerate(targets)
        ]
    results: list[RecordResult | None] = [None] * n
    if handle.by_sequence is not None and producer is not None:
        for j in range(n):
            found = handle.by_sequence.get(producer.base_sequence + j)
            if found is None:
                gone = RequestTimedOut("the original of this retried record is no longer in the log")
                results[j] = RecordResult(targets[j], None, None, gone)
            else:
                results[j] = RecordResult(found[0], found[1], found[2])
        return results  # type: ignore[return-value]
    for (part, base, _count), rows in zip(handle.parts, batch_rows, strict=True):
        for k, j in enumerate(rows):
            results[j] = RecordResult(part, base + k, stamps[j] if stamps[j] is not None else now)
    return results  # type: ignore[return-value]
