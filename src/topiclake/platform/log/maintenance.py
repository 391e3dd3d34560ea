"""Keeping topic tables lean while they are written: checkpoints, log cleanup, compaction, vacuum.

Measured with deltalake 1.6.6 (one small append per commit, checkpoint every 20 versions): commit latency
grows from ~7 ms to ~74 ms p50 by commit 1,000 when the old ``_delta_log`` files stay, and stays at ~6 ms
when they are cleaned after each checkpoint; 1,000 active data files alone cost little at commit time but
make a historic fetch open 1,000 files. So one thread per broker, apart from the commit path, does for
every open topic:

- a checkpoint every ``checkpoint_interval`` versions, then deletes log entries older than the checkpoint
  and than ``log_retention_ms`` (the table's ``delta.logRetentionDuration``; Spark's cleanup honours the
  same property) unless a reader holds a log lease on the topic (:mod:`topiclake.platform.storage.leases`);
- compaction of every (partition, segment) that has ``compact_min_files`` small files: its records
  rewritten, sorted by offset, into few files by a predicate overwrite (see :meth:`TableMaintainer._rewrite`
  for why not delta-rs ``optimize``). It never blocks a producer: an append that raced it commits again
  at once; a conflict with a Spark job or another broker just fails this round, and while a Spark job
  holds a ``rewrite`` lease on the topic there is no compaction round at all;
- every ``vacuum_interval_ms``, a VACUUM of files unreferenced for ``vacuum_retention_hours``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import orjson
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from topiclake.errors import TopiclakeError
from topiclake.platform.config import BrokerConfig
from topiclake.platform.log._compaction_round import CompactionRound, Held, MaintenanceStats, Rewrites
from topiclake.platform.log.file_index import FileIndex, build_index
from topiclake.platform.log.local_state import LocalTableState
from topiclake.platform.log.object_state import ObjectTableState, StateGone
from topiclake.platform.storage import Storage
from topiclake.platform.storage.delta_state import read_txn
from topiclake.platform.storage.leases import LeaseKind, active_leases

logger = logging.getLogger(__name__)


#: How often the maintenance thread asks each table whether a round is due (TableMaintainer.due), seconds.
POLL_S = 0.02
#: A local topic table is checkpointed at most this often, seconds, however fast it commits: under
#: sustained load (40 commits/s) ``checkpoint_interval`` versions came twice a second, and each checkpoint
#: (every live file and a minute of tombstones) took a quarter of the maintenance thread, slipping the
#: rounds that keep files bounded (bench/sustained.py, issue 25).
LOCAL_CHECKPOINT_MIN_S = 2.0
#: Past :data:`LOCAL_CHECKPOINT_MIN_S`, a local checkpoint waits until the log since the last one holds as
#: many entries as that checkpoint held actions (its ``size``: live files and a minute of tombstones), or
#: this long, seconds: a checkpoint's cost grows with its actions, so one a fixed interval apart cost the
#: broker more per record the bigger the table (measured under one-record commits, ~250 a second, 1,000-3,000
#: actions: ~0.1 s of delta-rs CPU a checkpoint, ~0.2 ms a record every 2 s); readers then replay at most
#: about as many entries as the checkpoint has actions, and at most this long of log (issue 30).
LOCAL_CHECKPOINT_MAX_S = 10.0
#: On object storage a table of N actions (live files and tombstones) is checkpointed at most every N / this
#: many seconds (and at least ``checkpoint_interval`` versions apart): a checkpoint is one PUT of all its
#: actions, so a busy topic's ~100,000 tombstones would otherwise be uploaded (several MB) every second.
OBJECT_CHECKPOINT_ACTIONS_S = 10_000
#: ... and at most this long apart, seconds, once ``checkpoint_interval`` versions came: readers replay at
#: most this much log (one GET an entry) after the checkpoint.
OBJECT_CHECKPOINT_MAX_S = 10.0
#: How long a local topic table keeps tombstones (``delta.deletedFileRetentionDuration``, set by the topic
#: log when it opens the table). Compaction on the local append path removes every appended file, a few
#: hundred a second under load: with Delta's week of tombstones each checkpoint carried all of them (4,900
#: after 30 s of the sustained benchmark against 225 live files), took longer every round and starved
#: compaction. What tombstones protected, VACUUM's window, the modification time now gives: a rewrite
#: touches the files it removes (_local_compaction.py) and the vacuum is a full one, by listing.
TOMBSTONE_RETENTION_S = 60


def log_retention_property(ms: int) -> str:
    """``delta.logRetentionDuration`` for a retention in milliseconds."""
    return f"interval {max(ms // 1000, 0)} seconds"


class TableMaintainer(CompactionRound):
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
        history: Callable[[FileIndex, Callable[[str], int | None]], None] | None = None,
        hold: Callable[[], AbstractContextManager[None]] | None = None,
        version: Callable[[], int] | None = None,
        object_rewrites: Rewrites | None = None,
        held: Held | None = None,
        object_state: tuple[ObjectTableState, Callable[[int], bytes | None]] | None = None,
        leases_seen: Callable[[list[dict[str, object]]], None] | None = None,
        local_entries: Callable[[int], bytes | None] | None = None,
    ) -> None:
        self.topic = topic
        self._leases_seen = leases_seen  # the round's listing of leases, shared with the flusher's look
        # on S3 with the broker's own appends: the table's state kept from the entries the appender wrote
        # and read (handed over by the callable), checkpointed by us: no delta-rs replay (object_state.py)
        self._state = object_state
        self._round_leases: list[dict[str, object]] | None = None  # see _leases
        # on S3, a round's rewrites as one log entry of the topic's own appender (_object_compaction.py),
        # their records from what the broker holds in memory (held) when it does
        self._object_rewrites = object_rewrites
        self._held = held
        self._version = version  # the newest version the topic's log knows (no request to ask it)
        # holds the topic's own commits while a delta-rs commit of ours (vacuum) must win its version race
        self._hold = hold or nullcontext
        self._history = history  # records the partitions' ends (topiclake.platform.log.partition_offsets)
        self._last_history = time.monotonic()
        self._history_version = -1  # S3: the state's version when the ends were last recorded
        self._vacuumed_to = 0  # S3: tombstones deleted up to here (ms) were vacuumed already
        self._leads = leads or (lambda _p: True)
        self.uri = uri
        self._storage = storage
        self._config = config
        self._dt: DeltaTable | None = None
        self._last_vacuum = time.monotonic()
        self._last_checkpoint = 0.0  # monotonic time of the last checkpoint
        self._checkpoint_size = 0  # actions in the last checkpoint written here (local tables)
        self._last_compaction_version = -1
        self._held_version = -1  # the version a rewrite lease last held compaction at
        self._last_round = time.monotonic()
        self._round_version = -1  # the table version the last round started from
        self.stats = MaintenanceStats()
        self._lock = threading.Lock()
        self._closed = False  # the topic's log closed (deleted, or the broker stops): no more rounds
        # on a local disk, compactions commit the way the log's local appends do (_local_compaction.py)
        self._local = storage.is_local and config.local_append
        # on a local disk with the broker's own appends: the file index and txn ids kept from the entries
        # the appender wrote and read (handed over by the callable), no delta-rs replay a round
        # (local_state.py); delta-rs only for checkpoints and vacuum
        self._local_entries = local_entries
        self._local_state = (
            LocalTableState(uri, self._open, storage.filesystem(uri))
            if local_entries is not None and self._local
            else None
        )

    def _open(self) -> DeltaTable:
        return DeltaTable(self.uri, storage_options=self._storage.options())

    def _handle(self) -> DeltaTable:
        if self._dt is not None:
            try:
                self._dt.update_incremental()
                return self._dt
            except (DeltaError, OSError) as exc:  # entries it would replay cleaned up: open anew
                reason = str(exc).splitlines()[0]
                logger.info("topic %s: maintenance handle reopened (%s)", self.topic, reason)
        self._dt = self._open()
        return self._dt

    def due(self) -> bool:
        """Whether a round is due: ``maintenance_interval_ms`` after the last one, or on a local table as
        soon as ``compact_min_files`` versions were committed since (one look for one log entry).

        A local append commits one file per partition it touches, dozens of commits a second under load:
        at a fixed interval a partition gained ~30 files between two rounds, more than the N a round is
        meant to find (measured in bench/sustained.py, issue 25).
        """
        if not self._storage.is_local and self._version is not None and self._round_version >= 0:
            return self._due_on_object_store()
        if time.monotonic() - self._last_round >= self._config.maintenance_interval_ms / 1000:
            return True
        if not self._local or self._round_version < 0:
            return False
        step = self._config.compact_min_files
        return os.path.exists(os.path.join(self.uri, "_delta_log", f"{self._round_version + step:020d}.json"))

    def _due_on_object_store(self) -> bool:
        """On object storage a round costs requests (a LIST, a GET per log entry since the last round), so
        it is due only when there is work the log's own version tells of, asked without a request:
        ``checkpoint_interval`` new versions, or any new version and ``maintenance_interval_ms`` (at least
        5 s) since the last round; an idle table once every ``object_idle_round_ms`` (other writers' commits)
        and when vacuum is due. An idle topic then costs a few requests a minute, not a round every 500 ms."""
        assert self._version is not None
        now = time.monotonic()
        since = now - self._last_round
        moved = self._version() - self._round_version
        if moved >= self._config.checkpoint_interval:
            return True
        if moved > 0 and since >= max(self._config.maintenance_interval_ms / 1000, 5.0):
            return True
        if since >= self._config.object_idle_round_ms / 1000:
            return True
        return now - self._last_vacuum >= self._config.vacuum_interval_ms / 1000

    def close(self) -> None:
        """Run no round after the one in progress (waited for): the topic's log is closing, and its store
        client with it (a deleted topic's round would otherwise ask a closed client)."""
        with self._lock:
            self._closed = True

    def run_once(self) -> None:
        """One round: checkpoint and log cleanup when due, compaction where needed, vacuum when due."""
        with self._lock:
            if self._closed:
                return
            started = time.perf_counter()
            self._last_round = time.monotonic()
            self._round_leases = None
            self.stats.rounds += 1
            try:
                if self._state is not None:
                    try:
                        self._object_round(*self._state)
                    except ValueError as exc:  # a checkpoint it cannot read (multi-part, V2): delta-rs's
                        logger.warning("topic %s: maintenance falls back to delta-rs (%s)", self.topic, exc)
                        self._state = None
                elif self._local_state is not None:
                    self._local_round(self._local_state)
                else:
                    dt = self._handle()
                    self._round_version = dt.version()
                    # first: a slow checkpoint must not delay it (files pile up meanwhile)
                    self._compact(dt.version(), lambda: build_index(dt, self._fs()), dt)
                    if self._leads(0):
                        self._checkpoint(dt)
                        self._record_history(
                            lambda: (build_index(dt, self._fs()), lambda app: read_txn(dt, app))
                        )
                        self._vacuum(dt)
            except (DeltaError, OSError) as exc:
                self.stats.failures += 1
                self.stats.last_error = str(exc).splitlines()[0]
                self._dt = None  # start from a fresh handle next round
                if self._local_state is not None:
                    self._local_state.version = -1  # and a fresh state
                logger.warning("topic %s: maintenance round failed (%s); will retry", self.topic, exc)
            self.stats.count_round(time.perf_counter() - started)

    def _leases(self, kind: LeaseKind | None = None) -> list[dict[str, object]]:
        """The topic's unexpired leases (of ``kind``): listed once per round (a LIST, billed as a PUT),
        shared by compaction's and cleanup's checks."""
        if self._round_leases is None:
            self._round_leases = active_leases(self._storage, self.topic)
            if self._leases_seen is not None:
                self._leases_seen(self._round_leases)
        return [x for x in self._round_leases if kind is None or x.get("kind", "log") == kind]

    def _fs(self) -> Any:
        return self._storage.filesystem(self.uri)

    def _local_round(self, state: LocalTableState) -> None:
        """A round from the state kept of the local log's entries (see :mod:`.local_state`): compaction
        from its file index, the partitions' ends from it; the delta-rs handle is brought up to date only
        for a checkpoint (every :data:`LOCAL_CHECKPOINT_MIN_S` at most) or a vacuum."""
        assert self._local_entries is not None
        state.catch_up(self._local_entries)
        self._round_version = state.version
        self._compact(state.version, state.index, None)
        if not self._leads(0):
            return
        if self._checkpoint_due(state.version):
            self._checkpoint(self._handle())
        self._record_history(lambda: (state.index(), state.txn_version))
        if time.monotonic() - self._last_vacuum >= self._config.vacuum_interval_ms / 1000:
            self._vacuum(self._handle())

    def _object_round(self, state: ObjectTableState, entries: Callable[[int], bytes | None]) -> None:
        """A round from the state kept of the log's entries (see :mod:`.object_state`): compaction from
        its file index, checkpoints, log cleanup and the partitions' ends written from it; delta-rs only
        opens the table for a vacuum (every ``vacuum_interval_ms``, when a tombstone came of age)."""
        assert self._version is not None
        try:
            if state.version < 0:
                state.seed()
            state.catch_up(self._version(), entries)
        except StateGone as exc:  # another writer's cleanup outran us: read from its checkpoint
            logger.info("topic %s: table state read again (%s)", self.topic, exc)
            state.seed()
        self._round_version = state.version
        self._compact(state.version, state.index, None)
        if not self._leads(0):
            return
        self._own_checkpoint(state)
        # no delta-rs handle (a LIST and GETs, billed) for the partitions' ends: the state's index and
        # txn ids, and only after a change; a lite vacuum only when a tombstone came of age since the last
        if state.version != self._history_version and self._record_history(
            lambda: (state.index(), state.txn_version)  # the state's: no request
        ):
            self._history_version = state.version
        if time.monotonic() - self._last_vacuum >= self._config.vacuum_interval_ms / 1000:
            cutoff = int((time.time() - self._config.vacuum_retention_hours * 3600) * 1000)
            if state.tombstones.any_between(self._vacuumed_to, cutoff):
                self._vacuum(DeltaTable(self.uri, storage_options=self._storage.options()))
                self._vacuumed_to = cutoff
            else:
                self._last_vacuum = time.monotonic()
                self.stats.vacuums_skipped += 1

    def _own_checkpoint(self, state: ObjectTableState) -> None:
        last = max(self.stats.last_checkpoint_version, state.checkpoint_version, 0)
        if state.version - last < self._config.checkpoint_interval:
            return
        # a checkpoint rewrites every live file and tombstone (over an hour of compacted files on object
        # storage): one of N actions at most every N / OBJECT_CHECKPOINT_ACTIONS_S seconds, 10 s at most
        actions = len(state.adds) + len(state.tombstones)
        wait = min(OBJECT_CHECKPOINT_MAX_S, actions / OBJECT_CHECKPOINT_ACTIONS_S)
        if time.monotonic() - self._last_checkpoint < wait:
            return
        cleaned = state.checkpoint(
            self._config.log_retention_ms,
            held=lambda: bool(self._leases()),  # a reader holds the log whole
            listed_cleanup=lambda: DeltaTable(
                self.uri, storage_options=self._storage.options()
            ).cleanup_metadata(),
        )
        self.stats.cleanups_held += not cleaned
        self.stats.checkpoints += 1
        self.stats.last_checkpoint_version = state.checkpoint_version
        self._last_checkpoint = time.monotonic()

    def _record_history(self, source: Callable[[], tuple[FileIndex, Callable[[str], int | None]]]) -> bool:
        """Record the partitions' ends when due (``offsets_history_ms``); False when not due."""
        interval = self._config.offsets_history_ms / 1000
        if self._history is None or not interval or time.monotonic() - self._last_history < interval:
            return False
        self._last_history = time.monotonic()
        try:
            self._history(*source())
        except TopiclakeError as exc:  # a lost bound only: the next round records again
            logger.warning("topic %s: partition offsets not recorded: %s", self.topic, exc.message)
            return False
        return True

    def _checkpoint_due(self, version: int) -> bool:
        if version - max(self.stats.last_checkpoint_version, 0) < self._config.checkpoint_interval:
            return False
        if not self._local:
            return True
        # hundreds of local commits a second would otherwise checkpoint twice a second, every one of them
        # rewriting all the table's actions: as many new entries as the last checkpoint's actions, or
        # LOCAL_CHECKPOINT_MAX_S
        since = time.monotonic() - self._last_checkpoint
        if since < LOCAL_CHECKPOINT_MIN_S:
            return False
        moved = version - max(self.stats.last_checkpoint_version, 0)
        return since >= LOCAL_CHECKPOINT_MAX_S or moved >= self._checkpoint_size

    def _checkpoint(self, dt: DeltaTable) -> None:
        version = dt.version()
        if not self._checkpoint_due(version):
            return
        dt.create_checkpoint()
        if self._local:
            self._checkpoint_size = _checkpoint_size(self.uri)
        if self._leases():
            self.stats.cleanups_held += 1  # a reader holds the log whole (platform/storage/leases.py)
        else:
            dt.cleanup_metadata()
        self.stats.checkpoints += 1
        self.stats.last_checkpoint_version = version
        self._last_checkpoint = time.monotonic()
        logger.debug("topic %s: checkpoint at version %d, old log entries cleaned", self.topic, version)

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
                # local tables keep tombstones briefly (TOMBSTONE_RETENTION_S): a lite vacuum, which deletes
                # only files of unexpired tombstones, would never delete what compaction removed
                full=self._local,
            )
        self.stats.vacuums += 1
        if removed:
            logger.info("topic %s: vacuum removed %d unreferenced files", self.topic, len(removed))


def _checkpoint_size(uri: str) -> int:
    """The actions of a local table's last checkpoint (``_last_checkpoint``'s ``size``; 0 when unknown)."""
    try:
        with open(os.path.join(uri, "_delta_log", "_last_checkpoint"), "rb") as fh:
            return int(orjson.loads(fh.read()).get("size") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0
