"""A broker's produce paths: records, Arrow tables and rows; partitioning, per-record checks, idempotent
producers, forwarding to leaders, waiting for acks. Split from :mod:`.broker`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

import pyarrow as pa

from topiclake.errors import InvalidRecord, PartitionNotFound, RecordTooLarge, RequestTimedOut, TopiclakeError
from topiclake.platform._broker_base import BrokerBase
from topiclake.platform._produce_tables import conform, group, suspects
from topiclake.platform.cluster.metadata import BrokerEndpoint
from topiclake.platform.cluster.routing import Forwarder
from topiclake.platform.log.append_handle import results_of
from topiclake.platform.log.rows import Rows, check
from topiclake.platform.log.topic_log import AppendHandle, TopicLog
from topiclake.platform.records import (
    ProducerInfo,
    Record,
    RecordResult,
    normalize_acks,
    records_to_arrow,
)

logger = logging.getLogger("topiclake.platform.broker")  # one logger for all parts of the broker
_T = TypeVar("_T")


class BrokerProduce(BrokerBase):
    """Produce records to the topic logs (or forward them to the partition's leader)."""

    # ------------------------------------------------------------------ produce

    def init_producer(self) -> ProducerInfo:
        """A new idempotent producer id (random 62-bit), epoch 0, first sequence 0."""
        return ProducerInfo(producer_id=random.getrandbits(62), epoch=0, base_sequence=0)

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        partition: int | None = None,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
    ) -> list[RecordResult]:
        """Append records; one result per record, in order.

        A record goes to ``partition`` if given, else its own ``partition``, else Kafka's partition for its
        key, else round-robin. With ``acks="all"`` this returns after the Delta commit that holds the
        records; with ``"1"`` after offsets are assigned; with ``"0"`` at once, without offsets.

        Per-record problems (too large, unknown partition) are returned as that record's error; the others
        are still written. With ``producer`` (idempotent) the request is all or nothing.

        Raises:
            TopicNotFound, Throttled, OutOfOrderSequence, InvalidProducerEpoch, InvalidRecord: nothing
                was written.
        """
        if not records:
            self.log(topic)  # an unknown topic is still an error
            return []
        table = records_to_arrow(records)
        explicit = [r.partition for r in records]
        return self.produce_table(
            topic, table, explicit, partition=partition, acks=acks, producer=producer, timeout_ms=timeout_ms
        )

    def produce_table(
        self,
        topic: str,
        table: pa.Table,
        explicit: list[int | None] | None = None,
        *,
        partition: int | None = None,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
    ) -> list[RecordResult]:
        """:meth:`produce` for records already in columns (``key``, ``value``, ``headers``,
        ``timestamp_ms``, as :data:`~topiclake.platform.records.INPUT_SCHEMA`), with each record's explicit
        partition or None in ``explicit``. The HTTP routes build these columns straight from JSON."""
        ack = normalize_acks(acks)
        log = self.log(topic)
        info = log.info
        n_parts = info.partitions
        if partition is not None and not 0 <= partition < n_parts:
            raise PartitionNotFound(
                f"topic {topic} has no partition {partition} (it has {n_parts})",
                topic=topic,
                partition=partition,
            )
        n = table.num_rows
        if n == 0:
            return []
        explicit = explicit if explicit is not None else [None] * n
        limit = info.config.max_message_bytes
        results: list[RecordResult | None] = [None] * n
        failed = False
        for i in suspects(table, explicit, limit, n_parts):  # vectorized screen, then exact per-record check
            error = self._check_row(topic, table, i, explicit[i], limit, n_parts)
            if error is not None:
                failed = True
                target = explicit[i] if explicit[i] is not None else partition
                results[i] = RecordResult(target, None, None, error)
        if self.schema_check is not None and info.config.validates_schemas:
            for i, error in enumerate(self.schema_check(topic, info.config, table)):
                if error is not None and results[i] is None:
                    failed = True
                    results[i] = RecordResult(
                        explicit[i] if explicit[i] is not None else partition, None, None, error
                    )
        if failed:
            if producer is not None:
                raise next(r.error for r in results if r is not None and r.error is not None)
            ok = [i for i, r in enumerate(results) if r is None]
            if not ok:
                return [r for r in results if r is not None]
            table = table.take(pa.array(ok, pa.int64()))
        else:
            ok = list(range(n))
        keys = table["key"].to_pylist() if partition is None else []
        targets = self._targets(keys, [explicit[i] for i in ok], partition, n_parts)
        if self.router is not None and not all(log.leads(p) for p in set(targets)):
            produced = self.router.produce(
                topic,
                table,
                targets,
                ack,
                producer,
                timeout_ms,
                lambda p, sub: self._append(topic, log, sub, [p] * sub.num_rows, ack, producer, timeout_ms),
            )
        else:
            produced = self._append(topic, log, table, targets, ack, producer, timeout_ms)
        for slot, res in zip(ok, produced, strict=True):
            results[slot] = res
        return results  # type: ignore[return-value]

    def _append(
        self,
        topic: str,
        log: TopicLog,
        table: pa.Table,
        targets: list[int],
        ack: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
    ) -> list[RecordResult]:
        """Append rows (input columns) to partitions this broker leads; one result per row, in order."""
        n = table.num_rows
        if producer is not None:
            seqs = pa.array(range(producer.base_sequence, producer.base_sequence + n), pa.int32())
            table = table.append_column("sequence", seqs)
        batches, rows = group(table, targets)
        handle = log.append(batches, ack, producer)  # type: ignore[arg-type]
        if ack == "all":
            self._wait(handle, topic, timeout_ms)
        log_append = log.info.config.message_timestamp_type == "LogAppendTime"
        stamps = table["timestamp_ms"].to_pylist() if not log_append else [None] * n
        return results_of(handle, ack, targets, rows, stamps, producer)

    def _route(
        self, topic: str, partition: int, local: Callable[[], _T], remote: Callable[[BrokerEndpoint], _T]
    ) -> _T:
        """``local()`` here, or ``remote(leader)`` when another broker of the cluster leads the partition."""
        if self.router is None:
            return local()
        return self.router.on_leader(topic, partition, local, remote)

    def _remote(self) -> Forwarder:
        assert self.router is not None
        return self.router.forwarder

    def produce_arrow(
        self,
        topic: str,
        partition: int,
        table: pa.Table,
        *,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> tuple[int, int, int | None]:
        """Columnar append of a whole batch to one partition: (partition, count, base offset).

        ``table`` has some of the columns ``key``, ``value`` (binary), ``headers``, ``timestamp_ms`` (int64).
        No per-record Python work is done. The base offset is None for ``acks=0``. ``on_appended`` is called
        once the batch has its offsets, before the wait for the commit (the Kafka listener orders a
        connection's appends with it while their commits overlap).
        """
        ack = normalize_acks(acks)
        log = self.log(topic)
        data = self._screen(topic, log, table)
        if data.num_rows == 0:
            log.high_watermark(partition)  # still reject an unknown partition
            return partition, 0, None
        if self.cluster is not None and not log.leads(partition):
            log.high_watermark(partition)  # an unknown partition is still an error of its own

            def forward(target: BrokerEndpoint) -> tuple[int, int, int | None]:
                res = self._remote().produce(target, topic, partition, data, ack, producer, timeout_ms)
                if res and res[0].error is not None:
                    raise res[0].error
                return partition, data.num_rows, res[0].offset if res else None

            return self._route(
                topic,
                partition,
                lambda: self._append_arrow(
                    topic, log, partition, data, ack, producer, timeout_ms, on_appended
                ),
                forward,
            )
        return self._append_arrow(topic, log, partition, data, ack, producer, timeout_ms, on_appended)

    def _append_arrow(
        self,
        topic: str,
        log: TopicLog,
        partition: int,
        data: pa.Table,
        ack: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
        on_appended: Callable[[], None] | None = None,
    ) -> tuple[int, int, int | None]:
        handle = _queue_arrow(log, partition, data, ack, producer)
        if on_appended is not None:
            on_appended()
        if ack == "0":
            return partition, data.num_rows, None
        if ack == "all":
            self._wait(handle, topic, timeout_ms)
        return partition, data.num_rows, self.arrow_base(handle, producer)

    def start_rows(
        self,
        topic: str,
        partition: int,
        rows: Rows,
        *,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
    ) -> AppendHandle | None:
        """Queue a whole batch for one partition without blocking (the Kafka listener's hot path).

        The same checks and guarantees as :meth:`produce_arrow` (one bad record fails the whole batch),
        but nothing here waits and no Arrow work is done per batch: the records stay lists until the flush
        builds one table for everything it commits (as for HTTP's hot path). The caller awaits
        ``handle.future`` (the Delta commit holding the batch) on its event loop and takes the base offset
        from :meth:`arrow_base`. Returns None, having queued nothing, when the general (blocking) path must
        serve the batch: the topic's log is not open yet, another broker leads the partition, the
        partition is unknown, records are validated against a schema registry, or the batch is empty.

        Raises:
            TopiclakeError: As :meth:`produce_arrow`; nothing was queued.
        """
        ack = normalize_acks(acks)
        log = self.open_log(topic)
        if log is None or not log.leads(partition) or not len(rows):
            return None
        info = log.info
        if not 0 <= partition < info.partitions:
            return None  # the general path answers with the right error
        if self.schema_check is not None and info.config.validates_schemas:
            return None
        errors = check(rows, [None] * len(rows), topic, info.config.max_message_bytes, info.partitions)
        if errors:
            raise next(iter(errors.values()))
        return log.append_rows([(partition, rows)], ack, producer)

    def start_arrow(
        self, topic: str, partition: int, table: pa.Table, *, acks: str | int = "all"
    ) -> AppendHandle | None:
        """:meth:`start_rows` for an Arrow batch (HTTP's Arrow IPC produce): the same checks as
        :meth:`produce_arrow`, columnar, and nothing waits. None, having queued nothing, when the general
        path must serve it (log not open, partition led elsewhere or unknown, schemas validated, empty).

        Raises:
            TopiclakeError: As :meth:`produce_arrow`; nothing was queued.
        """
        ack = normalize_acks(acks)
        log = self.open_log(topic)
        if log is None or not table.num_rows or not 0 <= partition < log.info.partitions:
            return None
        if not log.leads(partition):
            return None
        if self.schema_check is not None and log.info.config.validates_schemas:
            return None
        return _queue_arrow(log, partition, self._screen(topic, log, table), ack, None)

    @staticmethod
    def arrow_base(handle: AppendHandle, producer: ProducerInfo | None) -> int | None:
        """The base offset of a batch queued by :meth:`start_rows` (for a retried idempotent batch, its
        original offset), or None if unknown."""
        if handle.by_sequence is not None:
            first = handle.by_sequence.get(producer.base_sequence) if producer else None
            return first[1] if first else None
        return handle.parts[0][1]

    def screen(self, topic: str, table: pa.Table) -> pa.Table:
        """A batch in input columns after the checks a produce makes, without writing it (transactions
        stage records this way and append them at commit).

        Raises:
            TopicNotFound, RecordTooLarge, InvalidRecord: as :meth:`produce_arrow` would.
        """
        return self._screen(topic, self.log(topic), table)

    def _screen(self, topic: str, log: TopicLog, table: pa.Table) -> pa.Table:
        """The batch in input columns, after the per-record checks (one bad record fails the batch)."""
        data = conform(table)
        limit = log.info.config.max_message_bytes
        for i in suspects(data, [None] * data.num_rows, limit, log.info.partitions):
            error = self._check_row(topic, data, i, None, limit, log.info.partitions)
            if error is not None:
                raise error
        if self.schema_check is not None and log.info.config.validates_schemas:
            bad = next((e for e in self.schema_check(topic, log.info.config, data) if e is not None), None)
            if bad is not None:
                raise bad
        return data

    def _wait(self, handle: AppendHandle, topic: str, timeout_ms: int | None) -> None:
        timeout = (timeout_ms or self.config.request_timeout_ms) / 1000
        try:
            handle.wait(timeout)
        except FutureTimeout as exc:
            raise RequestTimedOut(
                f"commit to {topic} did not finish within {timeout:.1f} s; its outcome is unknown: retry "
                "with the same producer sequence to be safe",
                topic=topic,
            ) from exc

    def _check_row(
        self, topic: str, table: pa.Table, i: int, explicit: int | None, limit: int, n_parts: int
    ) -> TopiclakeError | None:
        if explicit is not None and not 0 <= explicit < n_parts:
            return PartitionNotFound(
                f"topic {topic} has no partition {explicit} (it has {n_parts})",
                topic=topic,
                partition=explicit,
            )
        row = table.slice(i, 1).to_pylist()[0]
        ts = row["timestamp_ms"]
        if ts is not None and ts < 0:
            return InvalidRecord(f"timestamp {ts} is negative", topic=topic)
        record = Record(row["key"], row["value"], [(h["key"], h["value"]) for h in row["headers"] or ()])
        size = record.size()
        if size > limit:
            return RecordTooLarge(
                f"record of {size} bytes is larger than max.message.bytes={limit} of topic {topic}",
                topic=topic,
                size=size,
            )
        return None

    def assign_partitions(
        self, keys: list[bytes | None], explicit: list[int | None], partition: int | None, n_parts: int
    ) -> list[int]:
        """Each record's partition: ``partition`` if given, else its explicit one, else Kafka's for its key,
        else round-robin."""
        return self._targets(keys, explicit, partition, n_parts)

    def _targets(
        self, keys: list[bytes | None], explicit: list[int | None], partition: int | None, n_parts: int
    ) -> list[int]:
        if partition is not None:
            return [partition] * len(explicit)
        targets = self.partitioner.assign(keys, n_parts)
        if explicit.count(None) != len(explicit):
            return [t if p is None else p for p, t in zip(explicit, targets, strict=True)]
        return targets


def _queue_arrow(
    log: TopicLog, partition: int, data: pa.Table, ack: str, producer: ProducerInfo | None
) -> AppendHandle:
    """Append a screened batch (input columns) to one partition's queue: its handle."""
    if producer is not None:
        seqs = pa.array(range(producer.base_sequence, producer.base_sequence + data.num_rows), pa.int32())
        data = data.append_column("sequence", seqs)
    return log.append([(partition, data)], ack, producer)  # type: ignore[arg-type]
