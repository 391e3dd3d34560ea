"""Keeping topic tables lean while they are written: checkpoints, log cleanup, compaction, vacuum.

Measured with deltalake 1.6.6 (one small append per commit, checkpoint every 20 versions): commit latency
grows from ~7 ms to ~74 ms p50 by commit 1,000 when the old ``_delta_log`` files stay, and stays at ~6 ms
when they are cleaned after each checkpoint; 1,000 active data files alone cost little at commit time but
make a historic fetch open 1,000 files. So one thread per broker, apart from the commit path, does for
every open topic:

- a checkpoint every ``checkpoint_interval`` versions, then deletes log entries older than the checkpoint
  and than ``log_retention_ms`` (the table's ``delta.logRetentionDuration``; Spark's cleanup honours the
  same property) unless a reader holds a log lease on the topic (:mod:`topiclake.platform.leases`);
- compaction of every (partition, segment) that has ``compact_min_files`` small files: its records
  rewritten, sorted by offset, into few files by a predicate overwrite (see :meth:`TableMaintainer._rewrite`
  for why not delta-rs ``optimize``). It never blocks a producer: an append that raced it commits again
  at once; a conflict with a Spark job or another broker just fails this round, and while a Spark job
  holds a ``rewrite`` lease on the topic there is no compaction round at all;
- every ``vacuum_interval_ms``, a VACUUM of files unreferenced for ``vacuum_retention_hours``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import TopiclakeError
from topiclake.platform._local_compaction import commit_rewrite
from topiclake.platform.config import BrokerConfig
from topiclake.platform.file_index import DataFile, FileIndex, build_index, read_files
from topiclake.platform.leases import active_leases
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)


def log_retention_property(ms: int) -> str:
    """``delta.logRetentionDuration`` for a retention in milliseconds."""
    return f"interval {max(ms // 1000, 0)} seconds"


@dataclass
class MaintenanceStats:
    """What maintenance did to one table (for metrics, benchmarks and tests)."""

    checkpoints: int = 0
    cleanups_held: int = 0
    compactions_held: int = 0
    compactions: int = 0
    files_removed: int = 0
    files_added: int = 0
    vacuums: int = 0
    failures: int = 0
    last_error: str | None = None
    last_checkpoint_version: int = -1
    durations_ms: list[float] = field(default_factory=list)


class TableMaintainer:
    """Maintenance of one topic table, with its own Delta handle (never the commit path's).

    In a cluster every broker maintains only what it leads: it compacts the partitions it leads, and the
    leader of partition 0 also does the table-wide chores (checkpoints, log cleanup, vacuum).
    """

    def __init__(
        self,
        topic: str,
        uri: str,
        storage: Storage,
        config: BrokerConfig,
        leads: Callable[[int], bool] | None = None,
        history: Callable[[DeltaTable], None] | None = None,
        hold: Callable[[], AbstractContextManager[None]] | None = None,
    ) -> None:
        self.topic = topic
        # holds the topic's own commits while a delta-rs commit of ours (vacuum) must win its version race
        self._hold = hold or nullcontext
        self._history = history  # records the partitions' ends (topiclake.platform.partition_offsets)
        self._last_history = time.monotonic()
        self._leads = leads or (lambda _p: True)
        self.uri = uri
        self._storage = storage
        self._config = config
        self._dt: DeltaTable | None = None
        self._last_vacuum = time.monotonic()
        self._last_compaction_version = -1
        self.stats = MaintenanceStats()
        self._lock = threading.Lock()
        # on a local disk, compactions commit the way the log's local appends do (_local_compaction.py)
        self._local = storage.is_local and config.local_append

    def _handle(self) -> DeltaTable:
        if self._dt is None:
            self._dt = DeltaTable(self.uri, storage_options=self._storage.options())
        else:
            self._dt.update_incremental()
        return self._dt

    def run_once(self) -> None:
        """One round: checkpoint and log cleanup when due, compaction where needed, vacuum when due."""
        with self._lock:
            started = time.perf_counter()
            try:
                dt = self._handle()
                if self._leads(0):
                    self._checkpoint(dt)
                    self._record_history(dt)
                self._compact(dt)
                if self._leads(0):
                    self._vacuum(dt)
            except (DeltaError, OSError) as exc:
                self.stats.failures += 1
                self.stats.last_error = str(exc).splitlines()[0]
                self._dt = None  # start from a fresh handle next round
                logger.warning("topic %s: maintenance round failed (%s); will retry", self.topic, exc)
            self.stats.durations_ms.append((time.perf_counter() - started) * 1000)
            del self.stats.durations_ms[:-1000]

    def _record_history(self, dt: DeltaTable) -> None:
        interval = self._config.offsets_history_ms / 1000
        if self._history is None or not interval or time.monotonic() - self._last_history < interval:
            return
        self._last_history = time.monotonic()
        try:
            self._history(dt)
        except TopiclakeError as exc:  # a lost bound only: the next round records again
            logger.warning("topic %s: partition offsets not recorded: %s", self.topic, exc.message)

    def _checkpoint(self, dt: DeltaTable) -> None:
        version = dt.version()
        if version - max(self.stats.last_checkpoint_version, 0) < self._config.checkpoint_interval:
            return
        dt.create_checkpoint()
        if active_leases(self._storage, self.topic):
            self.stats.cleanups_held += 1  # a reader holds the log whole (platform/leases.py)
        else:
            dt.cleanup_metadata()
        self.stats.checkpoints += 1
        self.stats.last_checkpoint_version = version
        logger.debug("topic %s: checkpoint at version %d, old log entries cleaned", self.topic, version)

    def _compact(self, dt: DeltaTable) -> None:
        version = dt.version()
        if version == self._last_compaction_version:
            return
        fs = self._storage.filesystem(self.uri)
        index = build_index(dt, fs)
        runs = []
        for partition in index.partitions():
            if not self._leads(partition):
                continue
            by_segment: dict[int, list[DataFile]] = {}
            for f in index.files(partition):
                by_segment.setdefault(f.segment, []).append(f)
            runs += [(partition, s, run) for s, files in by_segment.items() if (run := self.pick_run(files))]
        if runs and active_leases(self._storage, self.topic, kind="rewrite"):
            # a Spark job rewrites this topic: our millisecond commits would win every race against its
            # seconds-long rewrite; the next round after its lease is gone compacts what is left
            self.stats.compactions_held += 1
            return
        self._last_compaction_version = version
        for partition, segment, run in runs:
            # other partitions' files are untouched by a rewrite: the index stays valid
            self._rewrite(dt, fs, index, partition, segment, run)

    def pick_run(self, files: list[DataFile]) -> list[DataFile]:
        """The files of one segment to merge now, or none.

        Tiered, as in an LSM tree: a file's tier is floor(log_N(records)) with N = ``compact_min_files``;
        when a tier holds N or more files, they are all merged into one file of a higher tier. Every record
        is thus rewritten about log_N(records per full file) times, never once per round, and between
        rounds a segment holds at most N - 1 files per tier plus full-size files.
        """
        n = self._config.compact_min_files
        small = self._config.compact_target_bytes // 4
        tiers: dict[int, list[DataFile]] = {}
        for f in files:
            if f.size_bytes < small:
                tiers.setdefault(_tier(max(f.num_records, 1), n), []).append(f)
        for tier in sorted(tiers):
            if len(tiers[tier]) >= n:
                return sorted(tiers[tier], key=lambda f: f.min_offset)
        return []

    def _rewrite(
        self,
        dt: DeltaTable,
        fs: Any,
        index: FileIndex,
        partition: int,
        segment: int,
        files: list[DataFile],
    ) -> None:
        """Replace the records of one offset range of a (partition, segment) by the same records, sorted
        by offset, in as few files as the target size allows.

        delta-rs ``optimize.compact`` is not used: in deltalake 1.6.6 it does not check for a concurrent
        or earlier rewrite of the files it read (two compactions of the same files both commit, and every
        record is then there twice) and it ignores ``txn`` actions. A predicate overwrite has that check:
        if anything else rewrote or deleted those records since our snapshot, this commit fails and the
        next round starts again. Appends to the partition commit beside it after one retry.
        """
        lo = min(f.min_offset for f in files)
        hi = max(f.max_offset for f in files)
        inside = [
            f
            for f in index.files(partition)
            if f.segment == segment and f.max_offset >= lo and f.min_offset <= hi
        ]
        data = read_files(fs, inside, lo)
        data = data.filter(pc.less_equal(data["offset"], hi))
        if self._local:
            if not commit_rewrite(self.uri, dt.version(), inside, data):
                logger.info(
                    "topic %s partition %d segment %d: compaction dropped, its files were rewritten first",
                    self.topic,
                    partition,
                    segment,
                )
                return
        else:
            predicate = (
                f"partition = {partition} AND segment = {segment} AND offset >= {lo} AND offset <= {hi}"
            )
            write_deltalake(
                dt,
                data,
                mode="overwrite",
                predicate=predicate,
                target_file_size=self._config.compact_target_bytes,
                commit_properties=CommitProperties(custom_metadata={"topiclake.operation": "compaction"}),
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
        self.stats.compactions += 1
        self.stats.files_removed += len(inside)
        self.stats.files_added += 1
        logger.info(
            "topic %s partition %d segment %d: compacted %d files (offsets %d-%d, %d records)",
            self.topic,
            partition,
            segment,
            len(inside),
            lo,
            hi,
            data.num_rows,
        )

    def _vacuum(self, dt: DeltaTable) -> None:
        now = time.monotonic()
        if now - self._last_vacuum < self._config.vacuum_interval_ms / 1000:
            return
        self._last_vacuum = now
        with self._hold():  # vacuum commits twice: beside hundreds of local appends a second it never would
            dt.update_incremental()
            removed = dt.vacuum(
                retention_hours=self._config.vacuum_retention_hours,
                dry_run=False,
                enforce_retention_duration=False,
            )
        self.stats.vacuums += 1
        if removed:
            logger.info("topic %s: vacuum removed %d unreferenced files", self.topic, len(removed))


class Maintenance:
    """The broker's maintenance thread: runs every table's maintainer every ``maintenance_interval_ms``.

    Args:
        maintainers: Returns the maintainers of the topics open now.
        config: Broker tuning.
    """

    def __init__(self, maintainers: Callable[[], list[TableMaintainer]], config: BrokerConfig) -> None:
        self._maintainers = maintainers
        self._interval = config.maintenance_interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="topiclake-maintenance", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for maintainer in self._maintainers():
                if self._stop.is_set():
                    return
                maintainer.run_once()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop after the round in progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def _tier(records: int, base: int) -> int:
    tier = 0
    while records >= base:
        records //= base
        tier += 1
    return tier
