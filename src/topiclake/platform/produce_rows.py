"""Producing records given as lists, without blocking: the HTTP hot path.

:func:`start` validates, partitions and queues a request's records on the partition logs in a few
microseconds of plain Python, and returns a :class:`PendingProduce`; an ``async`` route awaits its commit
(``acks=all``) on the event loop instead of parking a thread, then calls :meth:`PendingProduce.finish`.
``start`` returns None when the request needs the general path: a topic not opened yet (opening reads the
table), partitions another broker leads (forwarding), or an idempotent request spread over partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topiclake.errors import PartitionNotFound, RequestTimedOut
from topiclake.platform.log.append_handle import AppendHandle, results_of
from topiclake.platform.log.rows import Rows, check
from topiclake.platform.records import ProducerInfo, RecordResult, normalize_acks

if TYPE_CHECKING:
    from topiclake.platform.broker import Broker


__all__ = ["PendingProduce", "committed", "results_of", "start"]


@dataclass
class PendingProduce:
    """A request whose records are queued: its results once committed (or at once for acks 0 and 1)."""

    topic: str
    acks: str
    handle: AppendHandle | None
    results: list[RecordResult | None]
    ok: list[int]  # request rows that were queued, in order
    targets: list[int]  # their partitions
    batch_rows: list[list[int]]  # per queued batch, positions in ``ok``
    stamps: list[int | None]  # per queued row: the CreateTime it was sent with
    producer: ProducerInfo | None
    timeout_s: float

    async def committed(self) -> None:
        """Wait (without a thread) until the records are committed; raise the commit's error if any."""
        if self.handle is not None and self.acks == "all":
            await committed((self.handle,), self.topic, self.timeout_s)

    def finish(self) -> list[RecordResult]:
        """One result per request row, in order (after :meth:`committed` for ``acks=all``)."""
        if self.handle is None:
            return self.results  # type: ignore[return-value]
        queued = results_of(self.handle, self.acks, self.targets, self.batch_rows, self.stamps, self.producer)
        for slot, res in zip(self.ok, queued, strict=True):
            self.results[slot] = res
        return self.results  # type: ignore[return-value]


async def committed(handles: Sequence[AppendHandle], topic: str, timeout_s: float) -> None:
    """Wait on the event loop until the records of ``handles`` are committed; raise the first commit
    error if any. One waiter per handle and caller: a retried batch may share its original's handle.

    Raises:
        RequestTimedOut: Not all committed within ``timeout_s``; the outcome is unknown.
    """
    waiters = [h.committed() for h in handles]
    try:
        async with asyncio.timeout(timeout_s):
            for waiter in waiters:
                await waiter
    except TimeoutError as exc:
        raise RequestTimedOut(
            f"commit to {topic} did not finish within {timeout_s:.1f} s; its outcome is unknown: retry "
            "with the same producer sequence to be safe",
            topic=topic,
        ) from exc


def start(
    broker: Broker,
    topic: str,
    rows: Rows,
    explicit: Sequence[int | None],
    *,
    partition: int | None = None,
    acks: str | int = "all",
    producer: ProducerInfo | None = None,
    timeout_ms: int | None = None,
) -> PendingProduce | None:
    """Queue the records of one request (see the module docs); None when the general path must serve it.

    Raises:
        TopicNotFound, PartitionNotFound, Throttled, OutOfOrderSequence, InvalidProducerEpoch: nothing
            was queued. With a producer, any record's error fails the whole request.
    """
    ack = normalize_acks(acks)
    log = broker.open_log(topic)
    if log is None:
        return None
    info = log.info
    if broker.schema_check is not None and info.config.validates_schemas:
        return None  # records are checked against the registry on the general path
    n_parts = info.partitions
    if partition is not None and not 0 <= partition < n_parts:
        raise PartitionNotFound(
            f"topic {topic} has no partition {partition} (it has {n_parts})", topic=topic, partition=partition
        )
    n = len(rows)
    errors = check(rows, explicit, topic, info.config.max_message_bytes, n_parts)
    if errors and producer is not None:
        raise next(iter(errors.values()))
    results: list[RecordResult | None] = [None] * n
    for i, error in errors.items():
        results[i] = RecordResult(explicit[i] if explicit[i] is not None else partition, None, None, error)
    ok = [i for i in range(n) if i not in errors] if errors else list(range(n))
    timeout_s = (timeout_ms or broker.config.request_timeout_ms) / 1000
    if not ok:
        return PendingProduce(topic, ack, None, results, [], [], [], [], producer, timeout_s)
    sub = rows.take(ok) if errors else rows
    keys = sub.keys if partition is None else []
    given = [explicit[i] for i in ok] if errors else list(explicit)  # a copy: the caller's stays its own
    targets = broker.assign_partitions(keys, given, partition, n_parts)
    parts = set(targets)
    if broker.router is not None and not all(log.leads(p) for p in parts):
        return None  # another broker leads some of them: forwarding blocks
    if producer is not None and len(parts) > 1:
        return None  # sequences run over the request's rows; the general path keeps them with each row
    by_part: dict[int, list[int]] = {}
    for j, p in enumerate(targets):
        by_part.setdefault(p, []).append(j)
    if len(by_part) == 1:
        (p,) = by_part
        batches = [(p, sub)]
    else:
        batches = [(p, sub.take(js)) for p, js in by_part.items()]
    handle = log.append_rows(batches, ack, producer)
    log_append = info.config.message_timestamp_type == "LogAppendTime"
    stamps: list[int | None] = [None] * len(ok) if log_append else sub.timestamps
    return PendingProduce(
        topic, ack, handle, results, ok, targets, list(by_part.values()), stamps, producer, timeout_s
    )
