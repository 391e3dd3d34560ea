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
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from deltalake import DeltaTable, PostCommitHookProperties
from deltalake.exceptions import DeltaError

from topiclake.errors import NotLeader, StorageError, TopiclakeError
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicInfo
from topiclake.platform.config import BrokerConfig
from topiclake.platform.log._append import LogAppends
from topiclake.platform.log._base import (
    FOREIGN_ERRORS,
    WRITABLE_FEATURES,
    LedPartition,
    commit_landed,
    epoch_app_id,
    partition_app_id,
)
from topiclake.platform.log._commit import LogCommits
from topiclake.platform.log._object_parts import (
    object_appender,
    object_rewrites,
    object_state,
    table_properties,
)
from topiclake.platform.log._reads import LogReads
from topiclake.platform.log.append_handle import AppendHandle, PendingBatch
from topiclake.platform.log.fast_append import LocalAppender
from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.platform.log.file_index import FileIndex
from topiclake.platform.log.maintenance import (
    TableMaintainer,
)
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.log.partition_offsets import ends_of, record_partition_offsets
from topiclake.platform.log.producer_state import ProducerStates, decode_state, producer_app_id
from topiclake.platform.log.spare_files import SPARES
from topiclake.platform.log.tail_cache import TailCache
from topiclake.platform.records import now_ms
from topiclake.platform.storage import Storage
from topiclake.platform.storage.delta_state import StateReader, log_entries_gone
from topiclake.schemas import PARTITION_COLUMNS, TOPIC_SCHEMA

logger = logging.getLogger(__name__)

__all__ = ["AppendHandle", "TopicLog", "commit_landed", "epoch_app_id", "partition_app_id"]


class TopicLog(LogAppends, LogCommits, LogReads):
    """The partitions of one topic led by this broker, over the topic's Delta table.

    Args:
        storage: The warehouse.
        info: The topic as the catalog knows it.
        config: Broker tuning.
        budget: Shared bound on accepted-but-uncommitted bytes.
    """

    def __init__(
        self,
        storage: Storage,
        info: TopicInfo,
        config: BrokerConfig,
        budget: MemoryBudget,
        file_cache: SmallFileCache | None = None,
    ) -> None:
        self.topic = info.name
        self.info = info
        self._storage = storage
        self._config = config
        self._budget = budget
        self._file_cache = file_cache
        self.uri = storage.topic_uri(info.name)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[PendingBatch] = []
        self._queued_records = 0
        self._queued_bytes = 0
        self._inflight: list[PendingBatch] = []
        self._last_requests = 1 << 30  # requests in the last commit (adaptive linger); none yet: linger
        self._last_commit_s = 0.0  # how long the last commit took (a costly commit lingers longer)
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
        self._holds = 0
        self._commit_lock = threading.Lock()  # one commit's files and entry; held by vacuum too
        self._dt = self._open_table()
        local = storage.is_local and config.maintenance and config.local_append
        self._fast = (
            LocalAppender(self.uri, self._dt.version())
            if local
            else object_appender(self.topic, config, storage, self._dt.version())
        )
        # partition -> leader epoch of the partitions this broker leads; None: all (no cluster)
        self._led: dict[int, int] | None = None
        self.maintainer = TableMaintainer(
            self.topic,
            self.uri,
            storage,
            config,
            leads=self.leads,
            history=self._record_ends,
            hold=self.hold_commits,
            version=self.known_version,
            object_rewrites=object_rewrites(self._fast, self.hold_commits),
            # the records of a run from the tail caches when they hold them all (either append path): on
            # a local disk too, a small file read back costs CPU (and the GIL) the appends need
            held=self.held_newest if self._fast is not None else None,
            object_state=object_state(self._fast),
            leases_seen=self._intents_seen,
            local_entries=self._fast.take_entry if isinstance(self._fast, LocalAppender) else None,
        )
        self._recorded_ends: tuple[int | None, ...] = ()
        # with maintenance on, checkpoints and log cleanup run on the maintenance thread, not in the commit
        self._hooks = (
            PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
            if config.maintenance
            else None
        )
        self._producers = ProducerStates(self._load_producer)
        self._parts: dict[int, LedPartition] = {}
        self._takeover_reader: DeltaTable | None = None
        self._state = StateReader(lambda: DeltaTable(self.uri, storage_options=self._storage.options()))
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
                        configuration=table_properties(self._config, self._storage),
                        storage_options=opts,
                        name=self.topic,
                    )
                    logger.info("created topic table %s at %s", self.topic, self.uri)
                except DeltaError:
                    if not self._storage.is_table(self.uri):  # lost a creation race: fine if it exists now
                        raise
            dt = DeltaTable(self.uri, storage_options=opts)
        except FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot open topic table {self.uri}: {exc}", topic=self.topic) from exc
        self._check_table(dt)
        # the windows maintenance keeps to, set once at open (never later, beside a job's commit)
        props = table_properties(self._config, self._storage)
        kept = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")
        conf = dt.metadata().configuration
        changes = {k: props[k] for k in kept if k in props and conf.get(k) != props[k]}
        if self._config.maintenance and changes:
            try:
                dt.alter.set_table_properties(changes)
            except FOREIGN_ERRORS as exc:  # another broker or job changed the table: try next time
                logger.warning("topic %s: cannot set %s: %s", self.topic, sorted(changes), exc)
        return dt

    def _check_table(self, dt: DeltaTable) -> None:
        conf = dt.metadata().configuration
        protocol = dt.protocol()
        features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
        unsupported = features - WRITABLE_FEATURES
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

    def _recover_partition(self, p: int, index: FileIndex, dt: DeltaTable | None = None) -> LedPartition:
        tv = self._read_txn(partition_app_id(self.topic, p), dt or self._dt)
        end = index.end_offset(p)
        hwm = tv if tv is not None else (end or 0)
        if end is not None and end > hwm:  # written without our txn (should not happen): never reuse
            logger.warning("topic %s partition %d: table end %d beyond txn %d", self.topic, p, end, hwm)
            hwm = end
        seg = index.segment_stats(p)
        base, nbytes, first = seg if seg is not None else (hwm, 0, now_ms())
        logger.info("topic %s partition %d: recovered high watermark %d", self.topic, p, hwm)
        return LedPartition(p, hwm, hwm, base, nbytes, first, TailCache(self._config.tail_cache_bytes))

    def _load_producer(self, producer_id: int, scope: int | None) -> tuple[int, int] | None:
        # after a takeover, the snapshot taken then holds what the previous leader committed
        # every producer this log wrote since it opened is in memory (see _log_local.py)
        dt = self._takeover_reader or self._dt
        version = self._read_txn(producer_app_id(self.topic, producer_id, scope), dt)
        return None if version is None else decode_state(version)

    def _read_txn(self, app_id: str, dt: DeltaTable) -> int | None:
        """A ``txn`` version from ``dt``, or, when log cleanup removed the entries that snapshot replays,
        from the log's state reader at least as new (``dt`` may be the commit path's: it is not moved).
        Callers hold the topic's lock (the state reader is not thread-safe)."""
        try:
            try:
                return dt.transaction_version(app_id)
            except FOREIGN_ERRORS as exc:
                if not log_entries_gone(exc):
                    raise
                logger.info(
                    "topic %s: snapshot %d outrun by log cleanup; reading newer", self.topic, dt.version()
                )
                return self._state.txn(app_id, at_least=dt.version())
        except FOREIGN_ERRORS as exc:
            raise StorageError(
                f"cannot read the state of topic {self.topic}: {exc}", topic=self.topic
            ) from exc

    def ensure_partitions(self, info: TopicInfo) -> None:
        """Adopt a new catalog state (more partitions, changed configs)."""
        with self._lock:
            self.info = info
            if info.partitions > len(self._parts):
                index = self._refresh_index(force=True)
                for p in range(len(self._parts), info.partitions):
                    self._parts[p] = self._recover_partition(p, index)

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
                    self._producers.forget(set(fresh))  # their state may have moved on at the old leader
                    self._takeover_reader = reader
                    for p in fresh:
                        old_part = self._parts[p]
                        self._parts[p] = self._recover_partition(p, index, reader)
                        old_part.wake()  # long polls on the old state re-read
                except FOREIGN_ERRORS as exc:
                    raise StorageError(f"cannot take over {self.topic}: {exc}", topic=self.topic) from exc
            dropped = [pend for pend in self._queue if pend.partition in lost]
            if dropped:
                self._queue = [pend for pend in self._queue if pend.partition not in lost]
                for pend in sorted(dropped, key=lambda pend: -pend.base_offset):
                    # their offsets are free again: regained while a commit of it is in flight (so not
                    # recovered from the table), the partition must go on after that commit, no gap
                    self._parts[pend.partition].next_offset = pend.base_offset
                self._queued_records -= sum(pend.count for pend in dropped)
                self._queued_bytes -= sum(pend.nbytes for pend in dropped)
        if gained or lost:
            logger.info(
                "topic %s: leading partitions %s (gained %s, lost %s)", self.topic, sorted(led), gained, lost
            )
        if dropped:
            self._budget.release(sum(pend.nbytes for pend in dropped))
            for pend in dropped:
                pend.handle.settle(
                    NotLeader(
                        f"this broker no longer leads {self.topic}-{pend.partition}; retry at its leader",
                        topic=self.topic,
                        partition=pend.partition,
                    )
                )

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
                pend.handle.settle(abandon)
        self._flusher.join(timeout_s)
        for part in self._parts.values():
            part.wake()
        self._closed = True
        self.maintainer.close()
        if isinstance(self._fast, ObjectAppender):
            self._fast.close()
        SPARES.forget(self.uri)  # no empty spare files left in the table's directories
        logger.info("topic %s: closed at version %d", self.topic, self.known_version())

    @contextmanager
    def hold_commits(self) -> Iterator[None]:
        """Hold this log's commits (at most ``WRITE_INTENT_MAX_S``) while the block runs: for a delta-rs
        commit of the maintenance thread that would otherwise keep losing its version to local appends."""
        with self._lock:
            self._holds += 1
        try:
            with self._commit_lock:  # the commit in flight, files written and all, finishes first
                yield
        finally:
            with self._lock:
                self._holds -= 1

    def stats(self) -> dict[str, object]:
        """Counters for metrics and benchmarks."""
        return {
            "topic": self.topic,
            "version": self.known_version(),
            "commits": self.commits,
            "fences": self.fences,
            "maintenance": self.maintainer.stats,
            "high_watermarks": {p: part.high_watermark for p, part in self._parts.items()},
        }

    def _record_ends(self, index: FileIndex, txn: Callable[[str], int | None]) -> None:
        """Record the partitions' ends in ``_system/partition_offsets`` if they moved (maintenance thread),
        from a file index and the table's ``txn`` ids (see :meth:`TableMaintainer._record_history`)."""
        info = self.info
        ends = tuple(txn(partition_app_id(info.name, p)) for p in range(info.partitions))
        if ends != self._recorded_ends:
            by = f"broker-{self._config.broker_id}"
            known = ends_of(info, partition_app_id, index, txn)
            record_partition_offsets(self._storage, info, partition_app_id, recorded_by=by, ends=known)
            self._recorded_ends = ends
