"""What one append leaves behind: its handle (where the records went, when they are committed), and the
per-record results a produce request answers from it (:func:`results_of`, shared by every produce path).

Split from :mod:`.topic_log` (the handle) and :mod:`.produce_rows` (the results), which re-export them.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from topiclake.errors import RequestTimedOut
from topiclake.platform.records import ProducerInfo, RecordResult
from topiclake.platform.rows import LazyBatch


class AppendHandle:
    """The outcome of one append request: where its records went, and when they are committed.

    ``parts`` lists (partition, base offset, count) in the order the request's batches were given;
    ``future`` completes when the records are committed (or fails with the reason they are not).
    ``by_sequence`` is set instead for a duplicate whose original was found in the table.
    """

    def __init__(self) -> None:
        self.pending: list[PendingBatch] = []
        self.future: Future[None] = Future()
        self.by_sequence: dict[int, tuple[int, int, int]] | None = None  # seq -> partition, offset, ts ms
        self.append_time_ms: int | None = None  # stamped on defaulted CreateTimes and on LogAppendTime

    @property
    def parts(self) -> list[tuple[int, int, int]]:
        return [(p.partition, p.base_offset, p.count) for p in self.pending]

    def wait(self, timeout_s: float | None) -> None:
        """Block until committed; raise the commit's error if it failed."""
        self.future.result(timeout=timeout_s)


@dataclass(eq=False)
class PendingBatch:
    """Records of one partition queued by an append: offsets assigned, waiting for the flush."""

    partition: int
    base_offset: int
    table: pa.Table | None  # None until the flush builds it from ``lazy``
    nbytes: int
    handle: AppendHandle
    count: int
    producer_txn: tuple[str, int] | None = None  # (producer txn app id, txn version)
    lazy: LazyBatch | None = None


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
