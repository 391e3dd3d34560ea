"""Produce without a thread per request: a partition's batches are decoded and queued as lists on the
event loop (:meth:`~topiclake.platform.broker.Broker.start_rows`; the flush builds one Arrow table for
every batch it commits) and their Delta commit is awaited there.

A client pipelines up to five Produce requests per connection; each of them used to hold a pool thread
until its commit. Queuing takes well under a millisecond, so it runs on the loop, in the connection's
request order (the handler calls :func:`start_partition` only after the previous request has queued its
batches), and every request queued before a commit starts shares that commit. Whatever needs the
blocking path — the topic's log not open yet, a partition another broker leads, schema validation —
returns None here before anything is queued, and the handler runs it on the listener's threads as before;
so do records bigger than :data:`LOOP_MAX_BYTES`, whose decoding would stall the loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka import records
from topiclake.kafka.context import Context
from topiclake.platform import Broker, ProducerInfo, produce_rows
from topiclake.platform.log.append_handle import AppendHandle
from topiclake.platform.records import now_ms

logger = logging.getLogger(__name__)

LOOP_MAX_BYTES = 256 * 1024
"""A partition's records up to this size are decoded and queued on the event loop (a Java client's default
batch is 16 KiB: ~0.1 ms of work); bigger ones (librdkafka batches up to 1 MB) on the listener's threads."""


@dataclass
class StartedPartition:
    """One partition of a Produce request: its answer so far, and the queued batches to wait for."""

    broker: Broker
    topic: str
    out: dict[str, Any]
    acks: int
    log_append: bool = False
    queued: list[tuple[AppendHandle, ProducerInfo | None]] = field(default_factory=list)

    async def answer(self, timeout_ms: int) -> dict[str, Any]:
        """The partition's response once its batches are committed (acks=all) or at once (acks 0, 1)."""
        if self.out.get("error_code", 0) != 0 or not self.queued:
            return self.out
        try:
            if self.acks == -1:
                await produce_rows.committed([h for h, _ in self.queued], self.topic, timeout_ms / 1000)
            base = self.broker.arrow_base(*self.queued[0])
        except TopiclakeError as exc:
            return {**self.out, "error_code": kerr.code_for(exc), "error_message": str(exc)}
        return {
            **self.out,
            "error_code": 0,
            "base_offset": base if base is not None and self.acks != 0 else -1,
            "log_append_time": now_ms() if self.log_append else -1,
        }


def start_partition(
    ctx: Context, topic: str, partition: int, data: bytes | None, acks: int
) -> StartedPartition | None:
    """Decode a partition's records and queue them without blocking; None (nothing queued) when the
    blocking path must serve them."""
    if data is not None and len(data) > LOOP_MAX_BYTES:
        return None  # decoding it would hold the event loop (and every other connection) for milliseconds
    broker = ctx.broker
    log = broker.open_log(topic)
    if log is None or not log.leads(partition):
        return None
    out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_append_time": -1}
    started = StartedPartition(broker, topic, out, acks)
    try:
        batches = records.decode_rows(bytes(data or b""))
    except records.UnsupportedMagic as exc:
        out.update(error_code=kerr.UNSUPPORTED_FOR_MESSAGE_FORMAT, error_message=str(exc))
        return started
    except records.CorruptBatch as exc:
        out.update(error_code=kerr.CORRUPT_MESSAGE, error_message=str(exc))
        return started
    if not batches:
        out.update(error_code=kerr.CORRUPT_MESSAGE, error_message="no record batch")
        return started
    started.log_append = log.info.config.message_timestamp_type == "LogAppendTime"
    try:
        for i, batch in enumerate(batches):
            if batch.transactional:
                out.update(error_code=kerr.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                return started
            producer = None
            if batch.producer_id >= 0:
                producer = ProducerInfo(
                    batch.producer_id, batch.producer_epoch, batch.base_sequence, scope=partition
                )
            handle = broker.start_rows(topic, partition, batch.rows, acks=acks, producer=producer)
            if handle is None:
                if i == 0:
                    return None  # nothing queued yet: the blocking path serves the whole partition
                # leadership moved between two batches of one request: the client retries the rest
                out.update(error_code=kerr.NOT_LEADER_OR_FOLLOWER, error_message="leadership moved")
                return started
            started.queued.append((handle, producer))
    except TopiclakeError as exc:
        out.update(error_code=kerr.code_for(exc), error_message=str(exc))
    return started
