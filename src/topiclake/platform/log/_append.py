"""A topic log's write side, up to the queue: admission (leadership, memory, idempotent producers),
offsets, segments. Split from :mod:`.topic_log`; the flusher that commits the queue is :mod:`._commit`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.errors import BrokerClosed, InvalidRecord
from topiclake.platform.log._base import LedPartition, LogBase
from topiclake.platform.log.append_handle import AppendHandle, PendingBatch
from topiclake.platform.log.file_index import read_file
from topiclake.platform.log.producer_state import Duplicate, producer_app_id
from topiclake.platform.log.rows import LazyBatch, Rows, topic_table
from topiclake.platform.records import Acks, ProducerInfo, now_ms, topic_rows

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log


class LogAppends(LogBase):
    """Append batches to the queue of the next commit."""

    def append(
        self,
        batches: Sequence[tuple[int, pa.Table]],
        acks: Acks,
        producer: ProducerInfo | None = None,
    ) -> AppendHandle:
        """Assign offsets to batches (partition, input table) and queue them for the next commit.

        All batches of one call are committed together, in one Delta commit.

        Raises:
            Throttled: The broker's buffers are full; nothing was accepted.
            PartitionNotFound, OutOfOrderSequence, InvalidProducerEpoch: nothing was accepted.
        """
        sizes = [t.nbytes for _, t in batches]
        nbytes = sum(sizes)
        count = sum(t.num_rows for _, t in batches)
        with self._lock:
            handle, duplicate = self._admit([p for p, _ in batches], producer, count, nbytes)
            if duplicate:
                return handle
            now = now_ms()
            handle.append_time_ms = now
            log_append = self.info.config.message_timestamp_type == "LogAppendTime"
            for (p, table), size in zip(batches, sizes, strict=True):
                part = self._parts[p]
                n = table.num_rows
                base = self._book(part, n, size, now)
                full = self._complete(table, p, base, part.segment_base, now, log_append, producer)
                pending = PendingBatch(p, base, full, size, handle, n)
                handle.pending.append(pending)
                self._queue.append(pending)
            self._enqueued(handle, producer, count, nbytes)
        if acks == "1" or acks == "0":
            logger.debug("topic %s: accepted %d records (acks=%s)", self.topic, count, acks)
        return handle

    def append_rows(
        self,
        batches: Sequence[tuple[int, Rows]],
        acks: Acks,
        producer: ProducerInfo | None = None,
    ) -> AppendHandle:
        """:meth:`append` for records given as lists (:class:`~.rows.Rows`): no Arrow
        work here; the flush builds one table for every request it commits. Same guarantees and errors."""
        sizes = [rows.nbytes() for _, rows in batches]
        nbytes = sum(sizes)
        count = sum(len(rows) for _, rows in batches)
        with self._lock:
            handle, duplicate = self._admit([p for p, _ in batches], producer, count, nbytes)
            if duplicate:
                return handle
            now = now_ms()
            handle.append_time_ms = now
            log_append = self.info.config.message_timestamp_type == "LogAppendTime"
            seq = producer.base_sequence if producer is not None else None
            for (p, rows), size in zip(batches, sizes, strict=True):
                part = self._parts[p]
                n = len(rows)
                base = self._book(part, n, size, now)
                lazy = LazyBatch(rows, part.segment_base, now, log_append)
                if producer is not None and seq is not None:
                    lazy.producer_id, lazy.producer_epoch, lazy.base_sequence = (
                        producer.producer_id,
                        producer.epoch,
                        seq,
                    )
                    seq += n
                pending = PendingBatch(p, base, None, size, handle, n, lazy=lazy)
                handle.pending.append(pending)
                self._queue.append(pending)
            self._enqueued(handle, producer, count, nbytes)
        return handle

    def _book(self, part: LedPartition, count: int, nbytes: int, now: int) -> int:
        """Under the lock: give ``count`` records the partition's next offsets (rolling the segment when
        due); return the first."""
        base = part.next_offset
        self._maybe_roll(part, now)
        part.next_offset += count
        part.segment_bytes += nbytes
        return base

    def _materialize(self, take: list[PendingBatch]) -> None:
        """Build the tables of the lazily queued batches in ``take``: one Arrow table for all of them."""
        lazy = [pend for pend in take if not pend.built and pend.lazy is not None]
        if not lazy:
            return
        table = topic_table(self.topic, [(p.partition, p.base_offset, p.lazy) for p in lazy if p.lazy])
        start = 0
        for pend in lazy:
            pend.built_in(table, start)
            start += pend.count

    def _admit(
        self, partitions: list[int], producer: ProducerInfo | None, count: int, nbytes: int
    ) -> tuple[AppendHandle, bool]:
        """Under the lock: refuse what cannot be appended, answer a retried idempotent request with its
        original (True), or take the memory for a new one and give it a handle (False)."""
        if self._closing:
            raise BrokerClosed(f"topic {self.topic} is closing", topic=self.topic)
        for p in partitions:
            self._partition(p)
            self._require_leader(p)
            if producer is not None and producer.scope is not None and p != producer.scope:
                raise InvalidRecord(
                    f"a producer scoped to partition {producer.scope} cannot write to partition {p}",
                    topic=self.topic,
                    partition=p,
                )
        if producer is not None:
            dup = self._producers.check(producer, count)
            if dup is not None:
                return self._duplicate(dup), True
        self._budget.acquire(nbytes, topic=self.topic)
        return AppendHandle(), False

    def _enqueued(self, handle: AppendHandle, producer: ProducerInfo | None, count: int, nbytes: int) -> None:
        """Under the lock: book a queued request (producer state, counters) and wake the flusher."""
        if producer is not None and handle.pending:
            version = self._producers.record(producer, count, handle)
            app_id = producer_app_id(self.topic, producer.producer_id, producer.scope)
            handle.pending[-1].producer_txn = (app_id, version)
        self._queued_records += count
        self._queued_bytes += nbytes
        self._queued_requests += 1
        # the flusher waits for the first request, then for the count of the last commit or a batch
        # limit (see LogCommits._run): waking it for every request in between made each one a GIL
        # hand-off to a thread that only went back to sleep
        if (
            len(self._queue) <= len(handle.pending)  # the queue was empty: the flusher sleeps untimed
            or self._queued_requests >= self._last_requests
            or self._queued_records >= self._config.batch_max_records
            or self._queued_bytes >= self._config.batch_max_bytes
        ):
            self._cond.notify_all()

    def _duplicate(self, dup: Duplicate) -> AppendHandle:
        if isinstance(dup.original, AppendHandle):
            logger.info(
                "topic %s: producer %d sequence %d is a retry; answering with its original offsets",
                self.topic,
                dup.producer_id,
                dup.base_sequence,
            )
            return dup.original
        handle = AppendHandle()
        handle.by_sequence = self._find_sequences(dup.producer_id, dup.base_sequence, dup.count, dup.scope)
        handle.settle()
        return handle

    def _find_sequences(
        self, producer_id: int, base: int, count: int, scope: int | None = None
    ) -> dict[int, tuple[int, int, int]]:
        found: dict[int, tuple[int, int, int]] = {}
        index = self._refresh_index(force=True)
        for p in index.partitions():
            if scope is not None and p != scope:
                continue
            for f in reversed(index.files(p)):
                t = read_file(self._fs, f)
                mask = pc.and_(
                    pc.equal(t["producer_id"], producer_id),
                    pc.and_(pc.greater_equal(t["sequence"], base), pc.less(t["sequence"], base + count)),
                )
                hit = t.filter(mask)
                stamps = pc.divide(pc.cast(hit["timestamp"], pa.int64()), 1000).to_pylist()
                for seq, off, ts in zip(
                    hit["sequence"].to_pylist(), hit["offset"].to_pylist(), stamps, strict=True
                ):
                    found[seq] = (p, off, ts)
                if len(found) >= count:
                    return found
        return found

    def _maybe_roll(self, part: LedPartition, now: int) -> None:
        cfg = self.info.config
        if part.segment_bytes == 0:
            part.segment_first_ms = now
            return
        if part.segment_bytes >= cfg.segment_bytes or now - part.segment_first_ms >= cfg.segment_ms:
            logger.info(
                "topic %s partition %d: rolled segment %d -> %d",
                self.topic,
                part.partition,
                part.segment_base,
                part.next_offset,
            )
            part.segment_base = part.next_offset
            part.segment_bytes = 0
            part.segment_first_ms = now

    def _complete(
        self,
        table: pa.Table,
        partition: int,
        base: int,
        segment: int,
        now: int,
        log_append: bool,
        producer: ProducerInfo | None,
    ) -> pa.Table:
        return topic_rows(table, self.topic, partition, base, segment, now, log_append, producer)
