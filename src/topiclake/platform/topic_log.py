"""The log of one topic: its Delta table, the leaders of its partitions, and the group commit.

Writes: request threads hand batches to :meth:`TopicLog.append`, which assigns offsets under the topic's
lock and queues them. One flusher thread per topic takes everything queued, lingers briefly for more, and
commits it as ONE Delta commit that also carries, per partition, a ``txn`` action whose version is the new
high watermark (and one per idempotent producer). Only then are ``acks=all`` requests answered.

Fencing: a commit whose ``txn`` app id was advanced by another writer since this broker's snapshot fails
(delta-rs reports "Concurrent transaction failed"). The log then refreshes, sees the other writer's high
watermark, moves its not-yet-committed batches behind it (rebase) and commits again, so offsets stay
contiguous and no two records share one. A commit that fails for another reason (a concurrent delete by
retention, an I/O error) is retried; whether an earlier attempt landed is told by the commit's id in the
Delta history, so a batch is never written twice.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import (
    BrokerClosed,
    CommitConflict,
    InvalidRecord,
    NotLeader,
    OffsetOutOfRange,
    PartitionNotFound,
    RequestTimedOut,
    StorageError,
    TopiclakeError,
)
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicInfo
from topiclake.platform.config import BrokerConfig
from topiclake.platform.file_index import DataFile, FileIndex, build_index, read_file, read_files
from topiclake.platform.leases import WRITE_INTENT_MAX_S, active_leases
from topiclake.platform.maintenance import TableMaintainer, log_retention_property
from topiclake.platform.producer_state import (
    Duplicate,
    ProducerStates,
    decode_state,
    producer_app_id,
)
from topiclake.platform.records import Acks, FetchResult, ProducerInfo, now_ms, topic_rows
from topiclake.platform.rows import LazyBatch, Rows, topic_table
from topiclake.platform.storage import Storage
from topiclake.platform.tail_cache import TailCache, bounded_concat
from topiclake.schemas import PARTITION_COLUMNS, TOPIC_SCHEMA, TOPIC_TABLE_PROPERTIES

logger = logging.getLogger(__name__)

_FOREIGN_ERRORS = (DeltaError, OSError, pa.ArrowException)

#: Table features a topic table may carry: those delta-rs 1.6 writes correctly. Anything else (deletion
#: vectors, row tracking, type widening, v2 checkpoints, in-commit timestamps, domain metadata, column
#: mapping) would make appends fail, so a table with it is refused on open with a clear error.
_WRITABLE_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "timestampNtz"}
)


def commit_landed(dt: DeltaTable, commit_id: str, base_version: int) -> bool:
    """Whether the commit tagged ``topiclake.commit = commit_id`` landed after ``base_version``.

    How a writer whose commit raised tells a lost attempt from one that landed anyway (``dt`` refreshed).
    """
    newer = dt.version() - base_version
    return newer > 0 and any(c.get("topiclake.commit") == commit_id for c in dt.history(newer))


def partition_app_id(topic: str, partition: int) -> str:
    """The Delta ``txn`` app id whose version is the high watermark of a partition."""
    return f"topiclake/hwm/{topic}/{partition}"


def epoch_app_id(topic: str, partition: int) -> str:
    """The Delta ``txn`` app id whose version is the leader epoch of the partition's last leader commit."""
    return f"topiclake/epoch/{topic}/{partition}"


class AppendHandle:
    """The outcome of one append request: where its records went, and when they are committed.

    ``parts`` lists (partition, base offset, count) in the order the request's batches were given;
    ``future`` completes when the records are committed (or fails with the reason they are not).
    ``by_sequence`` is set instead for a duplicate whose original was found in the table.
    """

    def __init__(self) -> None:
        self.pending: list[_Pending] = []
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
class _Pending:
    partition: int
    base_offset: int
    table: pa.Table | None  # None until the flush builds it from ``lazy``
    nbytes: int
    handle: AppendHandle
    count: int
    producer_txn: tuple[str, int] | None = None  # (producer txn app id, txn version)
    lazy: LazyBatch | None = None


@dataclass(eq=False)
class _Partition:
    partition: int
    next_offset: int
    high_watermark: int
    segment_base: int
    segment_bytes: int
    segment_first_ms: int
    tail: TailCache
    cond: threading.Condition = field(default_factory=threading.Condition)


class TopicLog:
    """The partitions of one topic led by this broker, over the topic's Delta table.

    Args:
        storage: The warehouse.
        info: The topic as the catalog knows it.
        config: Broker tuning.
        budget: Shared bound on accepted-but-uncommitted bytes.
    """

    def __init__(self, storage: Storage, info: TopicInfo, config: BrokerConfig, budget: MemoryBudget) -> None:
        self.topic = info.name
        self.info = info
        self._storage = storage
        self._config = config
        self._budget = budget
        self.uri = storage.topic_uri(info.name)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[_Pending] = []
        self._queued_records = 0
        self._queued_bytes = 0
        self._inflight: list[_Pending] = []
        self._last_requests = 1 << 30  # requests in the last commit (adaptive linger); none yet: linger
        self._queued_requests = 0  # append calls queued since the last swap (a heuristic, not a ledger)
        self._closing = False
        self._closed = False
        self._index_lock = threading.Lock()
        self._index: FileIndex | None = None
        self._fs = storage.filesystem(self.uri)
        self.commits = 0
        self.fences = 0
        self.commit_latencies_ms: list[float] = []
        self._intents_checked = 0.0
        self._intents = False
        self._dt = self._open_table()
        # partition -> leader epoch of the partitions this broker leads; None: all (no cluster)
        self._led: dict[int, int] | None = None
        self.maintainer = TableMaintainer(self.topic, self.uri, storage, config, leads=self.leads)
        # with maintenance on, checkpoints and log cleanup run on the maintenance thread, not in the commit
        self._hooks = (
            PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
            if config.maintenance
            else None
        )
        self._producers = ProducerStates(self._load_producer)
        self._parts: dict[int, _Partition] = {}
        self._takeover_reader: DeltaTable | None = None
        self._recover(info.partitions)
        self._flusher = threading.Thread(target=self._run, name=f"flush-{self.topic}", daemon=True)
        self._flusher.start()

    # ------------------------------------------------------------------ open and recover

    def _open_table(self) -> DeltaTable:
        opts = self._storage.options()
        try:
            if not self._storage.is_table(self.uri):
                try:
                    DeltaTable.create(
                        self.uri,
                        TOPIC_SCHEMA,
                        partition_by=list(PARTITION_COLUMNS),
                        configuration=self._table_properties(),
                        storage_options=opts,
                        name=self.topic,
                    )
                    logger.info("created topic table %s at %s", self.topic, self.uri)
                except DeltaError:
                    if not self._storage.is_table(self.uri):  # lost a creation race: fine if it exists now
                        raise
            dt = DeltaTable(self.uri, storage_options=opts)
        except _FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot open topic table {self.uri}: {exc}", topic=self.topic) from exc
        self._check_table(dt)
        wanted = self._table_properties()["delta.logRetentionDuration"]
        if (
            self._config.maintenance
            and dt.metadata().configuration.get("delta.logRetentionDuration") != wanted
        ):
            try:
                dt.alter.set_table_properties({"delta.logRetentionDuration": wanted})
            except _FOREIGN_ERRORS as exc:  # another broker or job changed the table: try next time
                logger.warning("topic %s: cannot set the log retention: %s", self.topic, exc)
        return dt

    def _table_properties(self) -> dict[str, str]:
        props = dict(TOPIC_TABLE_PROPERTIES)
        props["delta.checkpointInterval"] = str(self._config.checkpoint_interval)
        if self._config.maintenance:
            props["delta.logRetentionDuration"] = log_retention_property(self._config.log_retention_ms)
        else:
            props["delta.logRetentionDuration"] = "interval 30 days"
        return props

    def _check_table(self, dt: DeltaTable) -> None:
        conf = dt.metadata().configuration
        protocol = dt.protocol()
        features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
        unsupported = features - _WRITABLE_FEATURES
        if protocol.min_reader_version > 1 and protocol.reader_features is None:
            unsupported.add(f"reader version {protocol.min_reader_version}")
        if conf.get("delta.enableDeletionVectors") == "true":
            unsupported.add("deletionVectors")
        if unsupported:
            raise StorageError(
                f"topic table {self.uri} uses Delta features the broker cannot write: {sorted(unsupported)}; "
                "create topic tables with topiclake and run Spark jobs through topiclake.jobs.get_spark, "
                "which keeps them off (see docs/decisions.md)",
                topic=self.topic,
            )
        names = [f.name for f in dt.schema().fields]
        if names[: len(TOPIC_SCHEMA)] != TOPIC_SCHEMA.names:
            raise StorageError(f"{self.uri} is not a topic table (columns {names})", topic=self.topic)

    def _recover(self, partitions: int) -> None:
        index = self._refresh_index(force=True)
        for p in range(partitions):
            self._parts[p] = self._recover_partition(p, index)

    def _recover_partition(self, p: int, index: FileIndex, dt: DeltaTable | None = None) -> _Partition:
        tv = (dt or self._dt).transaction_version(partition_app_id(self.topic, p))
        end = index.end_offset(p)
        hwm = tv if tv is not None else (end or 0)
        if end is not None and end > hwm:  # written without our txn (should not happen): never reuse
            logger.warning("topic %s partition %d: table end %d beyond txn %d", self.topic, p, end, hwm)
            hwm = end
        seg = index.segment_stats(p)
        base, nbytes, first = seg if seg is not None else (hwm, 0, now_ms())
        logger.info("topic %s partition %d: recovered high watermark %d", self.topic, p, hwm)
        return _Partition(p, hwm, hwm, base, nbytes, first, TailCache(self._config.tail_cache_bytes))

    def _load_producer(self, producer_id: int, scope: int | None) -> tuple[int, int] | None:
        # after a takeover, the snapshot taken then holds what the previous leader committed
        dt = self._takeover_reader or self._dt
        version = dt.transaction_version(producer_app_id(self.topic, producer_id, scope))
        return None if version is None else decode_state(version)

    def ensure_partitions(self, info: TopicInfo) -> None:
        """Adopt a new catalog state (more partitions, changed configs)."""
        with self._lock:
            self.info = info
            if info.partitions > len(self._parts):
                index = self._refresh_index(force=True)
                for p in range(len(self._parts), info.partitions):
                    self._parts[p] = self._recover_partition(p, index)

    # ------------------------------------------------------------------ leadership (cluster)

    def leads(self, partition: int) -> bool:
        """Whether this broker leads the partition (always, outside a cluster)."""
        led = self._led
        return led is None or partition in led

    def set_leadership(self, led: dict[int, int]) -> None:
        """Lead exactly these partitions (partition -> leader epoch), as the controller decided.

        A partition gained is recovered from the table as it is now (the previous leader's last commit
        included); queued records of a partition lost are failed with NotLeader (retriable): they were
        never committed, so a retry at the new leader writes them once.
        """
        with self._lock:
            old = self._led
            self._led = dict(led)
            gained = [p for p, e in led.items() if old is None or old.get(p) != e]
            lost = [] if old is None else [p for p in old if p not in led]
            busy = {pend.partition for pend in [*self._inflight, *self._queue]}
            fresh = [p for p in gained if p not in busy and p in self._parts]
            if fresh:
                try:
                    reader = DeltaTable(self.uri, storage_options=self._storage.options())
                    index = self._refresh_index(force=True)
                    self._producers.forget_all()  # their state may have moved on at the old leader
                    self._takeover_reader = reader
                    for p in fresh:
                        old_part = self._parts[p]
                        self._parts[p] = self._recover_partition(p, index, reader)
                        with old_part.cond:  # wake long-polls on the old state: they re-read
                            old_part.cond.notify_all()
                except _FOREIGN_ERRORS as exc:
                    raise StorageError(f"cannot take over {self.topic}: {exc}", topic=self.topic) from exc
            dropped = [pend for pend in self._queue if pend.partition in lost]
            if dropped:
                self._queue = [pend for pend in self._queue if pend.partition not in lost]
                self._queued_records -= sum(pend.count for pend in dropped)
                self._queued_bytes -= sum(pend.nbytes for pend in dropped)
        if gained or lost:
            logger.info(
                "topic %s: leading partitions %s (gained %s, lost %s)", self.topic, sorted(led), gained, lost
            )
        if dropped:
            self._budget.release(sum(pend.nbytes for pend in dropped))
            for pend in dropped:
                if not pend.handle.future.done():
                    pend.handle.future.set_exception(
                        NotLeader(
                            f"this broker no longer leads {self.topic}-{pend.partition}; retry at its leader",
                            topic=self.topic,
                            partition=pend.partition,
                        )
                    )

    def _require_leader(self, partition: int) -> None:
        if not self.leads(partition):
            raise NotLeader(
                f"this broker does not lead {self.topic}-{partition}: retry at its leader (see metadata)",
                topic=self.topic,
                partition=partition,
            )

    # ------------------------------------------------------------------ write

    def _partition(self, partition: int) -> _Partition:
        part = self._parts.get(partition)
        if part is None:
            raise PartitionNotFound(
                f"topic {self.topic} has no partition {partition} (it has {len(self._parts)})",
                topic=self.topic,
                partition=partition,
            )
        return part

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
                base = part.next_offset
                self._maybe_roll(part, now)
                part.next_offset += n
                part.segment_bytes += size
                full = self._complete(table, p, base, part.segment_base, now, log_append, producer)
                pending = _Pending(p, base, full, size, handle, n)
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
        """:meth:`append` for records given as lists (:class:`~topiclake.platform.rows.Rows`): no Arrow
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
                base = part.next_offset
                self._maybe_roll(part, now)
                part.next_offset += n
                part.segment_bytes += size
                lazy = LazyBatch(rows, part.segment_base, now, log_append)
                if producer is not None and seq is not None:
                    lazy.producer_id, lazy.producer_epoch, lazy.base_sequence = (
                        producer.producer_id,
                        producer.epoch,
                        seq,
                    )
                    seq += n
                pending = _Pending(p, base, None, size, handle, n, lazy=lazy)
                handle.pending.append(pending)
                self._queue.append(pending)
            self._enqueued(handle, producer, count, nbytes)
        return handle

    def _materialize(self, take: list[_Pending]) -> None:
        """Build the tables of the lazily queued batches in ``take``: one Arrow table for all of them."""
        lazy = [pend for pend in take if pend.table is None and pend.lazy is not None]
        if not lazy:
            return
        table = topic_table(self.topic, [(p.partition, p.base_offset, p.lazy) for p in lazy if p.lazy])
        start = 0
        for pend in lazy:
            pend.table = table.slice(start, pend.count)
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
        handle.future.set_result(None)
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

    def _maybe_roll(self, part: _Partition, now: int) -> None:
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

    # ------------------------------------------------------------------ flush

    def _run(self) -> None:
        linger_s = self._config.linger_ms / 1000
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                deadline = time.monotonic() + linger_s
                # Adaptive linger: once as many requests wait as the last commit carried, the producers
                # that were waiting for it are all back; lingering longer only adds latency.
                while (
                    not self._closing
                    and self._queued_records < self._config.batch_max_records
                    and self._queued_bytes < self._config.batch_max_bytes
                    and self._queued_requests < self._last_requests
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                self._last_requests = max(1, self._queued_requests)
                self._queued_requests = 0
                self._inflight = self._queue
                self._queue = []
                self._queued_records = 0
                self._queued_bytes = 0
            self._flush()

    def _flush(self) -> None:
        take = self._inflight
        started = time.perf_counter()
        try:
            self._commit()
        except Exception as exc:
            error = exc if isinstance(exc, TopiclakeError) else StorageError(f"commit failed: {exc}")
            self._fail_all(error)
            return
        finally:
            self._budget.release(sum(p.nbytes for p in take))
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._takeover_reader = None  # our snapshot is now at least as new
        self.commits += 1
        self.commit_latencies_ms.append(elapsed_ms)
        if len(self.commit_latencies_ms) > 10_000:
            del self.commit_latencies_ms[:5_000]
        with self._lock:
            take = self._inflight
            self._inflight = []
        ends: dict[int, int] = {}
        runs: dict[int, tuple[int, list[pa.Table]]] = {}
        for pend in take:  # one table per partition per commit for the tail (offsets are contiguous)
            base, tables = runs.setdefault(pend.partition, (pend.base_offset, []))
            assert pend.table is not None  # built by _commit
            tables.append(pend.table)
            ends[pend.partition] = pend.base_offset + pend.count
        for p, (base, tables) in runs.items():
            joined = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
            self._parts[p].tail.add(base, joined)
        for p, end in ends.items():
            part = self._parts[p]
            with part.cond:
                part.high_watermark = max(part.high_watermark, end)
                part.cond.notify_all()
        for pend in take:
            if not pend.handle.future.done():
                pend.handle.future.set_result(None)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "topic %s: committed version %d with %d records in %.1f ms, ends %s",
                self.topic,
                self._dt.version(),
                sum(p.count for p in take),
                elapsed_ms,
                ends,
            )

    def _commit(self) -> None:
        commit_id = uuid.uuid4().hex
        attempt = 0
        known = True  # whether every earlier attempt is known not to have landed
        while True:
            with self._lock:
                take = list(self._inflight)
            # in-flight batches change only on this thread (commit, rebase), so no lock while building
            self._materialize(take)
            lost = {pend.partition for pend in take if not self.leads(pend.partition)}
            if lost and attempt > 0:  # leadership went while we retried: stop writing those partitions
                unknown = None
                if not known:
                    unknown = RequestTimedOut(
                        f"{self.topic}: lost leadership while a commit failed; its outcome is unknown: retry "
                        "(with an idempotent producer to be safe)",
                        topic=self.topic,
                    )
                self._fail_partitions(lost, unknown)
                continue
            if not take:
                return
            ends: dict[int, int] = {}
            producers: dict[str, int] = {}
            for pend in take:
                ends[pend.partition] = pend.base_offset + pend.count
                if pend.producer_txn is not None:
                    producers[pend.producer_txn[0]] = pend.producer_txn[1]
            now = now_ms()
            txns = [Transaction(partition_app_id(self.topic, p), end, now) for p, end in sorted(ends.items())]
            txns += [Transaction(app_id, v, now) for app_id, v in producers.items()]
            led = self._led
            if led is not None:  # the leader epoch travels with every commit of a cluster's leader
                txns += [
                    Transaction(epoch_app_id(self.topic, p), led[p], now) for p in sorted(ends) if p in led
                ]
            data = pa.concat_tables([p.table for p in take if p.table is not None])
            self._yield_to_writers()
            base_version = self._dt.version()
            try:
                write_deltalake(
                    self._dt,
                    data,
                    mode="append",
                    commit_properties=CommitProperties(
                        app_transactions=txns,
                        custom_metadata={
                            "topiclake.commit": commit_id,
                            "topiclake.broker": str(self._config.broker_id),
                        },
                    ),
                    post_commithook_properties=self._hooks,
                )
                self._storage.sync_commit(self.uri, self._dt.version())
                if self._dt.version() != base_version + 1:
                    # delta-rs committed on top of others' commits, now in our snapshot: if one of them
                    # was another writer's, queued records must move behind it before the next commit
                    self._rebase_if_fenced(committed=ends)
                return
            except _FOREIGN_ERRORS as exc:
                attempt += 1
                reason = str(exc).splitlines()[0]
                known = self._refresh_after_failure()
                if known and commit_landed(self._dt, commit_id, base_version):
                    logger.warning(
                        "topic %s: commit %s landed despite error (%s)", self.topic, commit_id, reason
                    )
                    return
                if self._rebase_if_fenced():
                    attempt = 0  # another writer moved on: a fresh try with new offsets
                    continue
                if attempt >= self._config.commit_attempts:
                    raise CommitConflict(
                        f"commit to topic {self.topic} failed {attempt} times: {reason}", topic=self.topic
                    ) from exc
                if "concurrent transaction" in reason and attempt <= 3:
                    # lost to a compaction or retention commit, now in our refreshed snapshot: try again now
                    logger.info(
                        "topic %s: commit retried after a concurrent rewrite (%s)", self.topic, reason
                    )
                    continue
                backoff = min(0.005 * 2**attempt, 1.0)
                logger.warning(
                    "topic %s: commit attempt %d failed (%s); retrying in %.0f ms",
                    self.topic,
                    attempt,
                    reason,
                    backoff * 1000,
                )
                time.sleep(backoff)

    def _yield_to_writers(self) -> None:
        """Hold this commit while another writer of the topic has announced its intent (see leases.py).

        The lease directory is looked at once every 100 ms at most, so an idle check costs nothing.
        """
        deadline = time.monotonic() + WRITE_INTENT_MAX_S
        while True:
            now = time.monotonic()
            if now - self._intents_checked >= (0.02 if self._intents else 0.1):
                self._intents_checked = now
                try:
                    self._intents = bool(active_leases(self._storage, self.topic, kind="write"))
                except OSError:
                    self._intents = False
                if self._intents:
                    logger.info("topic %s: holding commits for another writer's intent", self.topic)
            if not self._intents or now >= deadline or self._closing:
                return
            time.sleep(0.01)

    def _refresh_after_failure(self) -> bool:
        try:
            self._dt.update_incremental()
            return True
        except _FOREIGN_ERRORS as exc:
            logger.warning("topic %s: cannot refresh table after failed commit: %s", self.topic, exc)
            return False

    def _rebase_if_fenced(self, committed: dict[int, int] | None = None) -> bool:
        # Every partition, not just those of the failed batch: the refreshed snapshot may hold another
        # writer's commit to a partition we are about to write next, and a commit from a snapshot that
        # already contains it would not be rejected.
        foreign = {}
        led = self._led
        for p, part in list(self._parts.items()):
            tv = self._dt.transaction_version(partition_app_id(self.topic, p)) or 0
            if tv <= max(part.high_watermark, (committed or {}).get(p, 0)):
                continue
            if led is not None and p not in led:  # another broker leads it: just follow its end
                with part.cond:
                    part.high_watermark = max(part.high_watermark, tv)
                part.next_offset = max(part.next_offset, tv)
                continue
            foreign[p] = tv
        if not foreign:
            return False
        self.fences += 1
        deposed = []
        if led is not None:
            for p in foreign:
                epoch = self._dt.transaction_version(epoch_app_id(self.topic, p)) or 0
                if epoch > led.get(p, -1):
                    deposed.append(p)
        with self._lock:
            for p in deposed:  # a newer leader has committed: stop writing this partition
                logger.error(
                    "topic %s partition %d: fenced by a leader with epoch %d (ours %d): giving it up",
                    self.topic,
                    p,
                    self._dt.transaction_version(epoch_app_id(self.topic, p)) or 0,
                    (self._led or {}).get(p, -1),
                )
                if self._led is not None:
                    self._led.pop(p, None)
            for p, tv in foreign.items():
                part = self._parts[p]
                base = tv
                if p not in deposed:
                    logger.warning(
                        "topic %s partition %d: fenced by another writer at offset %d (ours %d); "
                        "moving uncommitted records behind it",
                        self.topic,
                        p,
                        tv,
                        part.high_watermark,
                    )
                for pend in [*self._inflight, *self._queue]:
                    if pend.partition != p:
                        continue
                    n = pend.count
                    if pend.table is not None:  # a lazy batch takes its offsets from base_offset
                        offsets = pa.arange(base, base + n).cast(pa.int64())
                        pend.table = pend.table.set_column(4, "offset", offsets)
                    pend.base_offset = base
                    base += n
                part.next_offset = base
                part.tail.clear()
                with part.cond:
                    part.high_watermark = tv
                if part.segment_base > tv:
                    part.segment_base = tv
        if deposed:
            self._fail_partitions(set(deposed))
        return True

    def _fail_partitions(self, partitions: set[int], error: TopiclakeError | None = None) -> None:
        """Fail the uncommitted records of partitions this broker no longer leads (NotLeader unless
        ``error`` says otherwise)."""
        with self._lock:
            failed = [pend for pend in [*self._inflight, *self._queue] if pend.partition in partitions]
            self._inflight = [pend for pend in self._inflight if pend.partition not in partitions]
            queued = [pend for pend in self._queue if pend.partition in partitions]
            self._queue = [pend for pend in self._queue if pend.partition not in partitions]
            self._queued_records -= sum(pend.count for pend in queued)
            self._queued_bytes -= sum(pend.nbytes for pend in queued)
        self._budget.release(sum(pend.nbytes for pend in queued))
        for pend in failed:
            if not pend.handle.future.done():
                pend.handle.future.set_exception(
                    error
                    or NotLeader(
                        f"{self.topic}-{pend.partition} has a newer leader; retry there",
                        topic=self.topic,
                        partition=pend.partition,
                    )
                )

    def _fail_all(self, error: TopiclakeError) -> None:
        with self._lock:
            failed = [*self._inflight, *self._queue]
            queued_bytes = sum(p.nbytes for p in self._queue)
            self._inflight = []
            self._queue = []
            self._queued_records = 0
            self._queued_bytes = 0
            logger.error(
                "topic %s: %d batches failed (%s); resetting partitions from the table",
                self.topic,
                len(failed),
                error.message,
            )
            try:
                self._dt.update_incremental()
                self._takeover_reader = None
                self._producers.forget_all()
                index = self._refresh_index(force=True)
                for p in list(self._parts):
                    self._parts[p] = self._recover_partition(p, index)
            except Exception as exc:  # keep serving: next flush will try again
                logger.error("topic %s: reset failed: %s", self.topic, exc)
        self._budget.release(queued_bytes)
        for pend in failed:
            if not pend.handle.future.done():
                pend.handle.future.set_exception(error)

    # ------------------------------------------------------------------ read

    def _refresh_index(self, force: bool = False, min_version: int | None = None) -> FileIndex:
        with self._index_lock:
            index = self._index
            if force or index is None or (min_version is not None and index.version < min_version):
                self._index = index = self._build_index()
            return index

    def _build_index(self) -> FileIndex:
        for attempt in range(3):
            try:
                reader = DeltaTable(self.uri, storage_options=self._storage.options())
                return build_index(reader, self._fs)
            except _FOREIGN_ERRORS as exc:
                # a checkpoint or log entry cleaned up while the table was being opened: open it again
                if attempt == 2 or "not found" not in str(exc).lower():
                    message = f"cannot index topic table {self.uri}: {exc}"
                    raise StorageError(message, topic=self.topic) from exc
        raise AssertionError("unreachable")

    def high_watermark(self, partition: int) -> int:
        """The end offset: one past the last committed record."""
        return self._partition(partition).high_watermark

    def log_start_offset(self, partition: int) -> int:
        """The first offset still in the log (advanced by retention and deletion only)."""
        part = self._partition(partition)
        index = self._refresh_index()
        start = index.log_start_offset(partition)
        if start is None and part.high_watermark > 0:
            index = self._refresh_index(min_version=self._dt.version())
            start = index.log_start_offset(partition)
        return start if start is not None else part.high_watermark

    def fetch(
        self, partition: int, offset: int, max_records: int, max_bytes: int, wait_ms: float = 0
    ) -> FetchResult:
        """Committed records of a partition from ``offset`` on.

        Long-polls up to ``wait_ms`` when ``offset`` is the end of the log. Returns at least one record
        when there is one, even if it is larger than ``max_bytes``.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or beyond the end.
        """
        part = self._partition(partition)
        self._require_leader(partition)
        if wait_ms > 0 and offset >= part.high_watermark:
            deadline = time.monotonic() + wait_ms / 1000
            with part.cond:
                while part.high_watermark <= offset and not self._closing:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    part.cond.wait(remaining)
        hwm = part.high_watermark
        records = part.tail.read(offset, max_records, max_bytes) if 0 <= offset < hwm else None
        start = self.log_start_offset(partition)
        if records is None and (offset < start or offset > hwm):
            raise OffsetOutOfRange(
                f"offset {offset} is out of range [{start}, {hwm}] for {self.topic}-{partition}",
                topic=self.topic,
                partition=partition,
                offset=offset,
                log_start_offset=start,
                high_watermark=hwm,
            )
        if records is None and offset < hwm:
            records = self._read_table(partition, offset, max_records, max_bytes, hwm)
        if records is None:
            records = TOPIC_SCHEMA.empty_table()
        else:
            records = records.filter(pc.less(records["offset"], hwm))
        next_offset = int(records["offset"][-1].as_py()) + 1 if records.num_rows else offset
        return FetchResult(self.topic, partition, records, hwm, start, next_offset)

    def _read_table(
        self, partition: int, offset: int, max_records: int, max_bytes: int, hwm: int
    ) -> pa.Table | None:
        for attempt in range(2):
            index = self._refresh_index(force=attempt > 0)
            end = index.end_offset(partition)
            if end is None or end <= offset:
                index = self._refresh_index(min_version=self._dt.version())
            try:
                return self._read_window(index.files_from(partition, offset), offset, max_records, max_bytes)
            except FileNotFoundError:  # files compacted and vacuumed under a stale index
                logger.info("topic %s partition %d: index stale, rebuilding", self.topic, partition)
        return None

    def _read_window(
        self, candidates: list[DataFile], offset: int, max_records: int, max_bytes: int
    ) -> pa.Table | None:
        """Records from ``offset`` on, read from the files that can hold the next ``max_records`` offsets.

        Every record below the window's end lives in a file whose first offset is below it, so the window
        is complete even when files overlap; a window that holds nothing (a gap left by key compaction)
        moves on to the next file.
        """
        start = offset
        while candidates:
            window_end = start + max_records
            wanted = [f for f in candidates if f.min_offset < window_end]
            size = 0
            for i, f in enumerate(wanted):  # byte guard: compressed size overstates small files, so loose
                size += f.size_bytes
                if size >= 4 * max_bytes + 64 * 1024 and i + 1 < len(wanted):
                    window_end = wanted[i + 1].min_offset
                    wanted = wanted[: i + 1]
                    break
            table = read_files(self._fs, wanted, start)
            table = table.filter(pc.less(table["offset"], window_end))
            if table.num_rows:
                return bounded_concat([table], max_records, max_bytes)
            later = [f for f in candidates if f.min_offset >= window_end]
            if not later:
                return None
            start = min(f.min_offset for f in later)
            candidates = later
        return None

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= ``timestamp_ms``, or None if there is none."""
        self._partition(partition)
        target_us = timestamp_ms * 1000
        index = self._refresh_index(min_version=self._dt.version())
        for f in index.files(partition):
            if f.max_timestamp_us is not None and f.max_timestamp_us < target_us:
                continue
            table = read_file(self._fs, f)
            hit = table.filter(pc.greater_equal(pc.cast(table["timestamp"], pa.int64()), target_us))
            if hit.num_rows:
                return int(pc.min(hit["offset"]).as_py())
        return None

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout_s: float = 30.0, abandon: TopiclakeError | None = None) -> None:
        """Commit what is queued, stop the flusher, and refuse further appends.

        With ``abandon`` (the topic was deleted elsewhere), queued records fail with that error instead of
        being committed into a table that is gone.
        """
        with self._cond:
            if self._closed:
                return
            self._closing = True
            dropped = self._queue if abandon is not None else []
            if dropped:
                self._queue = []
                self._queued_records = 0
                self._queued_bytes = 0
            self._cond.notify_all()
        if dropped:
            self._budget.release(sum(pend.nbytes for pend in dropped))
            for pend in dropped:
                if not pend.handle.future.done():
                    pend.handle.future.set_exception(abandon)
        self._flusher.join(timeout_s)
        for part in self._parts.values():
            with part.cond:
                part.cond.notify_all()
        self._closed = True
        logger.info("topic %s: closed at version %d", self.topic, self._dt.version())

    def stats(self) -> dict[str, object]:
        """Counters for metrics and benchmarks."""
        return {
            "topic": self.topic,
            "version": self._dt.version(),
            "commits": self.commits,
            "fences": self.fences,
            "maintenance": self.maintainer.stats,
            "high_watermarks": {p: part.high_watermark for p, part in self._parts.items()},
        }
