"""A topic log's local append path (:mod:`.fast_append`): its commit step and what it does after losing a
version to another writer. Split from :mod:`.topic_log`.

The commit path's delta-rs snapshot is no longer refreshed by its commits, and need not be: it serves the
fence check (refreshed here first), producer state (every producer this log wrote since it opened is in
memory; a takeover keeps its own newer snapshot, ``_takeover_reader``, until the log's is newer) and
recovery after a failed commit (refreshed there). A refresh replays the entries since the snapshot, or
reopens the table when cleanup removed them (:meth:`LogLocal._refresh_snapshot`); replaying ~100 entries
took 20-46 ms, which as a periodic step on the flusher was the p99 of acks=all.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.errors import CommitConflict, StorageError
from topiclake.platform.log._base import FOREIGN_ERRORS, LogBase, epoch_app_id, partition_app_id
from topiclake.platform.log.append_handle import PendingBatch, whole_table
from topiclake.platform.log.fast_append import (
    LocalAppender,
    LostRace,
    Winners,
    added_bytes,
    commit_info,
    txn_action,
)
from topiclake.platform.log.object_append import ObjectAppender, ahead

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log

#: The longest a flush lingers because its commits are costly (see LogLocal._linger_s).
_MAX_COST_LINGER_S = 0.010


#: Upper bounds (ms) of the commit latency histogram: a local append takes ~1-5 ms, a delta-rs one 5-50 ms
#: on a local disk and 50-500 ms on an object store.
COMMIT_BUCKETS_MS = (0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 250, 500, 1000, 2500)


@dataclass
class CommitTimes:
    """Cumulative counts of a log's commits, either path (for ``/metrics``; written by the flusher only).

    ``counts[i]`` counts commits that took at most ``COMMIT_BUCKETS_MS[i]``, the last one all of them.
    """

    BOUNDS_MS: ClassVar[tuple[float, ...]] = COMMIT_BUCKETS_MS
    counts: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_BUCKETS_MS) + 1))
    sum_ms: float = 0.0
    commits: int = 0
    records: int = 0

    def add(self, elapsed_ms: float, records: int) -> None:
        """Count one commit of ``records`` records that took ``elapsed_ms``."""
        for i in range(bisect.bisect_left(COMMIT_BUCKETS_MS, elapsed_ms), len(self.counts)):
            self.counts[i] += 1
        self.sum_ms += elapsed_ms
        self.commits += 1
        self.records += records


def commit_table(take: list[PendingBatch]) -> pa.Table:
    """The one table of a commit's (built) batches."""
    data = whole_table(take)
    if data is None:
        data = pa.concat_tables([p.table for p in take if p.table is not None])
    if data.num_columns and data.column(0).num_chunks > 1:
        # one batch per request would cost delta-rs a partition split each: 32 one-record
        # requests commit in ~25 % less CPU, 200 in ~60 % less, as one contiguous batch
        data = data.combine_chunks()
    return data


BatchKey = tuple[tuple[int, int, int, int], ...]


def partition_of(pend: PendingBatch) -> int:
    return pend.partition


def _batch_key(take: list[PendingBatch]) -> BatchKey:
    """What a commit's data files depend on: which batches, at which offsets (a rebase moves them), in
    any order (the queue's, or the commit's, sorted by partition)."""
    return tuple(sorted((p.partition, p.base_offset, p.count, id(p)) for p in take))


class LogLocal(LogBase):
    """Commits through :class:`LocalAppender` on a local warehouse or :class:`ObjectAppender` on S3
    (None: delta-rs commits)."""

    _fast: LocalAppender | ObjectAppender | None
    _commit_times: CommitTimes | None = None  # made by the first commit
    # the last local commit's rows by (partition, segment) and their Arrow bytes, for the tail caches
    # (LogCommits._flush); None when the commit took another path
    _tail_groups: tuple[list[tuple[tuple[int, int], pa.Table]], int] | None = None
    # S3: the next commit's batches and the add actions of their files, stored while a log PUT was in
    # flight (_prefetch); used when the next commit is exactly these batches at these offsets
    _prefetched: tuple[BatchKey, list[dict[str, dict[str, object]]]] | None = None
    # the last flush lingered on for requests still arriving (object storage, LogCommits._run)
    _lingered_on = False
    # S3: the store-ahead running during a log PUT (_prefetch), awaited after that commit's answers
    _storing: concurrent.futures.Future[None] | None = None
    # requests the next store-ahead gathers before it stores (0: what is queued when the log PUT starts)
    _expect_requests = 0
    _committing_requests = 0  # the requests of the commit whose log entry is being PUT
    pipelined = 0  # flushes made two overlapping commits (_split_for_pipeline)

    @property
    def commit_times(self) -> CommitTimes:
        """What this log's commits took and carried, since it opened."""
        return self._commit_times or CommitTimes()

    def _count_commit(self, elapsed_ms: float, records: int) -> None:
        """Count a commit of either path (the flusher's, from its start to its log entry)."""
        self.commits += 1
        self.commit_latencies_ms.append(elapsed_ms)
        if len(self.commit_latencies_ms) > 10_000:
            del self.commit_latencies_ms[:5_000]
        if self._commit_times is None:
            self._commit_times = CommitTimes()
        self._commit_times.add(elapsed_ms, records)

    def known_version(self) -> int:
        """The newest table version this log knows to exist (its own commits included)."""
        fast = self._fast
        return max(self._dt.version(), fast.version if fast is not None else -1)

    def _linger_s(self) -> float:
        """How long a flush waits for more records: ``linger_ms``, and on S3 at least the store's
        measured round trip (a commit costs two: lingering one more groups about twice the requests per
        commit, halving the requests per MB, for at most a third more latency)."""
        linger = self._config.linger_ms / 1000
        # a commit that costs more (many partitions: a Parquet file each) is worth a longer wait for the
        # producers it just acknowledged (see LogCommits._flush): up to half its own time, at most 10 ms
        # (linger_ms=0 still means no linger)
        if linger > 0:
            linger = max(linger, min(self._last_commit_s / 2, _MAX_COST_LINGER_S))
        fast = self._fast
        if isinstance(fast, ObjectAppender):
            return max(linger, min(fast.put_ms, 250.0) / 1000)
        return linger

    def _linger_cap_s(self, linger: float) -> float:
        """How long a flush may linger in all while requests keep arriving: on object storage up to
        ``object_linger_max_ms`` (a commit costs a PUT per partition whatever it carries: a load with more
        in flight than one commit takes is cheaper in fewer, larger commits; WarpStream writes one object
        per 250 ms); elsewhere ``linger`` (it does not linger on)."""
        if isinstance(self._fast, ObjectAppender):
            return max(linger, self._config.object_linger_max_ms / 1000)
        return linger

    def _commit_fast(
        self,
        fast: LocalAppender | ObjectAppender,
        data: pa.Table,
        txn_ids: list[tuple[str, int]],
        now: int,
        custom: dict[str, str],
        take: list[PendingBatch],
    ) -> None:
        self._tail_groups = None
        if fast.stale():  # a checkpoint past our version: entries after it may be gone, catch up first
            self._refresh_snapshot()
            if self._rebase_if_fenced():  # queued offsets moved: the caller rebuilds the batch
                raise LostRace(Winners(versions=[fast.version]))
        with self._commit_lock:  # vacuum takes it: no file of ours is deleted before its commit
            prefetched, self._prefetched = self._prefetched, None
            if prefetched is not None and prefetched[0] != _batch_key(take):
                assert isinstance(fast, ObjectAppender)
                fast.delete_files(prefetched[1])  # stored for batches since moved: no entry will name them
                prefetched = None
            if prefetched is not None:
                adds = prefetched[1]
                assert isinstance(fast, ObjectAppender)
                fast.stored_ahead += 1
            else:
                adds = fast.write_files(data)
                if isinstance(fast, LocalAppender) and len(fast.last_groups) > 1:
                    self._tail_groups = (fast.last_groups, data.get_total_buffer_size())
            metrics = {
                "numFiles": str(len(adds)),
                "numOutputRows": str(data.num_rows),
                "numOutputBytes": str(added_bytes(adds)),
            }
            actions: list[Mapping[str, object]] = [commit_info(metrics, custom), *adds]
            actions += [txn_action(a, v, now) for a, v in txn_ids]
            if isinstance(fast, ObjectAppender):
                version = self._commit_object(fast, actions, custom["topiclake.commit"])
            else:
                version = fast.commit(actions)
        self._storage.sync_commit(self.uri, version)

    def _commit_object(
        self, fast: ObjectAppender, actions: list[Mapping[str, object]], commit_id: str
    ) -> int:
        """The log entry's conditional PUT (:meth:`_commit_entry`), while the next commit's files are
        stored (:meth:`_prefetch`; awaited by :meth:`_take_prefetched`, after this commit's answers)."""
        done = threading.Event()
        if self._storing is None:  # one at a time: a commit rebuilt after a lost race comes here again
            expect, self._expect_requests = self._expect_requests, 0
            self._storing = ahead().submit(self._prefetch, fast, done, expect)
        self._committing_requests = len({id(p.handle) for p in self._inflight})
        try:
            return self._commit_entry(fast, actions, commit_id)
        finally:
            done.set()
            with self._cond:
                self._cond.notify_all()  # a store-ahead still gathering stops

    def _commit_entry(self, fast: ObjectAppender, actions: list[Mapping[str, object]], commit_id: str) -> int:
        """The log entry, at the next version after each one lost, reusing the data files already
        stored: they hold the same records unless a winner moved our offsets (then :class:`LostRace`
        makes the caller rebuild the commit, and the stored files, which no entry names, are deleted)."""
        races = 0
        while True:
            try:
                return fast.commit(actions, commit_id)
            except LostRace as race:
                races += 1
                if races > 1000:  # other writers took a thousand versions in a row: give up
                    raise CommitConflict(
                        f"commit to topic {self.topic} lost {races} races to other writers", topic=self.topic
                    ) from race
                if self._after_lost_race(race.winners):
                    fast.delete_files([a for a in actions if "add" in a])  # type: ignore[misc]
                    raise LostRace(Winners(versions=race.winners.versions)) from None

    def _split_for_pipeline(self) -> None:
        """Under the lock, when a flush has just taken the queue: on object storage, a flush of two or more
        requests, under ``object_pipeline_max_bytes`` and not lingered on, becomes two commits, the first
        half of its requests now and the rest at once after them, their files stored during the first's
        log PUT (:meth:`_prefetch`). The first half's producers come back while the second's entry is
        PUT; the store-ahead gathers them and stores their files then: in a closed loop of producers a
        commit then waits for one round trip of the store, not two (a data PUT, then the entry)."""
        self._expect_requests = 0
        take = self._inflight
        if (
            not isinstance(self._fast, ObjectAppender)
            or self._lingered_on
            or sum(p.nbytes for p in take) >= self._config.object_pipeline_max_bytes
        ):
            return
        order: dict[int, int] = {}  # requests in arrival order (a request's batches are queued together)
        for pend in take:
            order.setdefault(id(pend.handle), len(order))
        half = (len(order) + 1) // 2
        cut = next((i for i, pend in enumerate(take) if order[id(pend.handle)] >= half), len(take))
        rest = take[cut:]
        if not rest or any(order[id(pend.handle)] < half for pend in rest):
            return
        self.pipelined += 1
        self._inflight, self._queue = take[:cut], rest + self._queue
        self._queued_records += sum(p.count for p in rest)
        self._queued_bytes += sum(p.nbytes for p in rest)
        self._queued_requests += len(order) - half
        self._last_requests = half

    def _prefetch(self, fast: ObjectAppender, done: threading.Event, expect: int) -> None:
        """While the log entry's PUT is in flight (one round trip to the store), store the data files of
        what is queued, the next commit's batches: on S3 a commit is then one round trip of the flusher,
        not two. With ``expect``, the requests the commit before acknowledged are gathered first (they
        come back during this PUT: a pipelined pair of commits, :meth:`_split_for_pipeline`); if they are
        not all back when the PUT ends, nothing is stored (the flusher's linger gathers them). The
        batches stay queued (a rebase, a lost leadership or a failure handles them as any queued batch);
        :meth:`_take_prefetched` makes them the next commit, and the files are used only if the batches
        still sit at the offsets they were stored with (else they are deleted)."""
        if self._lingered_on:  # requests still arriving: they go into the next (long) linger's commit
            return
        with self._cond:
            while expect and self._queued_requests < expect and not done.is_set() and not self._closing:
                self._cond.wait(0.005)  # appends wake the flusher, not this: a short poll
            batches = sorted(self._queue, key=partition_of)  # as the commit will order them (_commit)
            if not batches or self._holds or self._closing or self._queued_requests < expect:
                return
            self._materialize(batches)  # under the lock: a rebase of these batches waits for it
            key = _batch_key(batches)
        try:
            adds = fast.write_files(commit_table(batches))
        except Exception as exc:  # the commit stores them itself (a closed client: RuntimeError)
            logger.info("topic %s: files stored ahead failed (%s)", self.topic, exc)
            return
        self._prefetched = (key, adds)

    def _take_prefetched(self) -> bool:
        """Make the batches whose files :meth:`_prefetch` stored the in-flight commit, at once (they are
        still the head of the queue, at the same offsets); False when there are none."""
        storing, self._storing = self._storing, None
        if storing is not None:
            storing.result()
        prefetched = self._prefetched
        if prefetched is None:
            return False
        key = prefetched[0]
        with self._lock:
            head = self._queue[: len(key)]
            if self._closing or _batch_key(head) != key:
                self._prefetched = None
                head = []
            else:
                self._inflight = head
                self._queue = self._queue[len(key) :]
                self._queued_records -= sum(p.count for p in head)
                self._queued_bytes -= sum(p.nbytes for p in head)
                requests = len({id(p.handle) for p in head})
                self._last_requests = max(1, requests)
                self._queued_requests = max(0, self._queued_requests - requests)
        if not head:
            if isinstance(self._fast, ObjectAppender):
                self._fast.delete_files(prefetched[1])  # no entry will name them
            return False
        if self._config.object_pipeline_max_bytes > 0:  # a pipelined pair: gather who was just answered
            self._expect_requests = self._committing_requests
        return True

    def _after_lost_race(self, winners: Winners) -> bool:
        """After losing versions to ``winners``: whether the commit must be rebuilt (True) or simply
        tried at the next version (False).

        Rebuilt when this broker no longer leads a partition of the commit: the new leader may have
        written those offsets in a version just lost (its takeover read the table before this commit
        landed), so the commit must not land on top of it; the caller fails those batches with NotLeader
        (they never landed: a retry at the new leader writes them once). Compaction, retention and
        vacuum never write ``txn`` ids, other brokers only those of the partitions they lead: the next
        version is simply tried. A winner that wrote the ids of a partition we lead, or changed the
        table, makes us refresh the snapshot, check the table is still ours to write and move queued
        records behind another writer's (rebuilt when they moved).
        """
        moved = any(not self.leads(pend.partition) for pend in self._inflight)
        ours = {partition_app_id(self.topic, p) for p in list(self._parts) if self.leads(p)}
        ours |= {epoch_app_id(self.topic, p) for p in list(self._parts) if self.leads(p)}
        if not ours & winners.txns.keys() and not winners.changed_table:
            return moved  # other brokers write only the partitions they lead: no concern of ours
        self._refresh_snapshot()
        if winners.changed_table:
            self._check_table(self._dt)
        return self._rebase_if_fenced() or moved

    def _refresh_snapshot(self) -> None:
        """Bring the commit path's delta-rs snapshot to the table's newest version (reopened when the
        log entries it would read were cleaned up), and the local appender's version with it."""
        try:
            self._dt.update_incremental()
        except FOREIGN_ERRORS as exc:
            logger.info("topic %s: snapshot reopened (%s)", self.topic, str(exc).splitlines()[0])
            try:
                self._dt = DeltaTable(self.uri, storage_options=self._storage.options())
            except FOREIGN_ERRORS as exc2:
                message = f"cannot refresh topic table {self.uri}: {exc2}"
                raise StorageError(message, topic=self.topic) from exc2
        if self._fast is not None:
            self._fast.version = max(self._fast.version, self._dt.version())
