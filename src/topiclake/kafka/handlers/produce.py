"""Produce (RecordBatch v2, all codecs, acks 0/1/all, idempotent producers) and InitProducerId.

Transactional produce and InitProducerId with a transactional id are :mod:`.transactions`'.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka import records
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.context import ConnectionState, Context
from topiclake.kafka.handlers import transactions
from topiclake.kafka.handlers.produce_async import start_partition
from topiclake.platform.records import ProducerInfo, now_ms

logger = logging.getLogger(__name__)


class _Appended:
    """Counts a request's partitions down as their batches get offsets; resolves a loop future at zero."""

    def __init__(self, count: int, loop: asyncio.AbstractEventLoop, done: asyncio.Future[None]) -> None:
        self._left = count
        self._lock = threading.Lock()
        self._loop = loop
        self._done = done
        if count == 0:
            done.set_result(None)

    def signal(self) -> Callable[[], None]:
        """A callable to call (at least) once when one partition's batches have their offsets."""
        fired = False

        def fire() -> None:
            nonlocal fired
            with self._lock:
                if fired:
                    return
                fired = True
                self._left -= 1
                last = self._left == 0
            if last:
                self._loop.call_soon_threadsafe(_resolve, self._done)

        return fire


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _produce_partition(
    ctx: Context,
    topic: str,
    partition: int,
    data: bytes | None,
    acks: int,
    timeout_ms: int,
    appended: Callable[[], None],
) -> dict[str, Any]:
    try:
        return _produce_batches(ctx, topic, partition, data, acks, timeout_ms, appended)
    finally:
        appended()  # also when nothing was appended: the next request must not wait for this one


def _produce_batches(
    ctx: Context,
    topic: str,
    partition: int,
    data: bytes | None,
    acks: int,
    timeout_ms: int,
    appended: Callable[[], None],
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_append_time": -1}
    try:
        batches = records.decode(bytes(data or b""))
    except records.UnsupportedMagic as exc:
        return {**out, "error_code": kerr.UNSUPPORTED_FOR_MESSAGE_FORMAT, "error_message": str(exc)}
    except records.CorruptBatch as exc:
        return {**out, "error_code": kerr.CORRUPT_MESSAGE, "error_message": str(exc)}
    if not batches:
        return {**out, "error_code": kerr.CORRUPT_MESSAGE, "error_message": "no record batch"}
    base: int | None = None
    try:
        for i, batch in enumerate(batches):
            if batch.transactional:  # a transactional batch must name its transactional id
                return {**out, "error_code": kerr.INVALID_RECORD, "error_message": "no transactional_id"}
            producer = None
            if batch.producer_id >= 0:
                producer = ProducerInfo(
                    batch.producer_id, batch.producer_epoch, batch.base_sequence, scope=partition
                )
            last = i == len(batches) - 1
            _p, _n, first = ctx.broker.produce_arrow(
                topic,
                partition,
                batch.table,
                acks=acks,
                producer=producer,
                timeout_ms=timeout_ms or None,
                on_appended=appended if last else None,
            )
            if base is None:
                base = first
        log_append = ctx.broker.describe_topic(topic).config.message_timestamp_type == "LogAppendTime"
    except TopiclakeError as exc:
        return {**out, "error_code": kerr.code_for(exc), "error_message": str(exc)}
    return {
        **out,
        "error_code": 0,
        "base_offset": base if base is not None else -1,
        "log_append_time": now_ms() if log_append else -1,
    }


def _all_failed(body: Any, code: int) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partition_responses": [{"index": p.index, "error_code": code} for p in t.partition_data],
        }
        for t in body.topic_data
    ]


async def produce(ctx: Context, req: Request) -> dict[str, Any] | None:
    """Produce: each partition's batches appended through the broker's columnar path."""
    body = req.body
    acks = int(body.acks)
    timeout_ms = max(ms(body.timeout), 0)
    if body.transactional_id is not None:
        return await transactions.produce_transactional(ctx, req)
    if acks not in (0, 1, -1):
        return {"responses": _all_failed(body, kerr.INVALID_REQUIRED_ACKS)}
    # Appends follow the connection's request order (a client's pipelined batches of a partition carry
    # consecutive sequence numbers); the waits for their commits overlap.
    loop = asyncio.get_running_loop()
    conn = req.connection if isinstance(req.connection, ConnectionState) else ConnectionState()
    previous = conn.produce_tail
    mine: asyncio.Future[None] = loop.create_future()
    conn.produce_tail = mine
    count = sum(len(t.partition_data) for t in body.topic_data)
    appended = _Appended(count, loop, mine)
    try:
        if previous is not None:
            await previous
        jobs = []
        for t in body.topic_data:
            for p in t.partition_data:
                name, index = str(t.name), int(p.index)
                signal = appended.signal()
                # the common case queues on the event loop and awaits the commit there (no thread per request)
                started = start_partition(ctx, name, index, p.records, acks)
                if started is None:  # topic not open yet, partition led elsewhere, ...: the blocking path
                    job = ctx.run(_produce_partition, ctx, name, index, p.records, acks, timeout_ms, signal)
                else:
                    signal()
                    job = started.answer(timeout_ms or ctx.broker.config.request_timeout_ms)
                jobs.append(job)
        results = await asyncio.gather(*jobs)
    except BaseException:
        _resolve(mine)  # the connection's next produce request must not wait for this failed one
        raise
    if acks == 0:
        return None
    it = iter(results)
    responses = [
        {"name": t.name, "partition_responses": [next(it) for _ in t.partition_data]} for t in body.topic_data
    ]
    return {"responses": responses}


async def init_producer_id(ctx: Context, req: Request) -> dict[str, Any]:
    """InitProducerId: a broker-assigned producer id (epoch 0), or the same id with its epoch bumped; with a
    transactional id, the transaction coordinator's (:mod:`.transactions`)."""
    body = req.body
    if body.transactional_id is not None:
        return await transactions.init_transactional(ctx, req)
    pid = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    if pid >= 0 and 0 <= epoch < 32767:
        logger.info("kafka: producer %d bumps its epoch to %d", pid, epoch + 1)
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    info = ctx.broker.init_producer()
    return {"error_code": 0, "producer_id": info.producer_id, "producer_epoch": info.epoch}
