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
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.errors import StorageError
from topiclake.platform.log._base import FOREIGN_ERRORS, LogBase, epoch_app_id, partition_app_id
from topiclake.platform.log.fast_append import (
    LocalAppender,
    LostRace,
    Winners,
    added_bytes,
    commit_info,
    txn_action,
)

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log


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


class LogLocal(LogBase):
    """Commits on a local warehouse through :class:`LocalAppender` (None: delta-rs commits)."""

    _fast: LocalAppender | None
    _commit_times: CommitTimes | None = None  # made by the first commit

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

    def _commit_fast(
        self,
        fast: LocalAppender,
        data: pa.Table,
        txn_ids: list[tuple[str, int]],
        now: int,
        custom: dict[str, str],
    ) -> None:
        if fast.stale():  # a checkpoint past our version: entries after it may be gone, catch up first
            self._refresh_snapshot()
            if self._rebase_if_fenced():  # queued offsets moved: the caller rebuilds the batch
                raise LostRace(Winners(versions=[fast.version]))
        with self._commit_lock:  # vacuum takes it: no file of ours is deleted before its commit
            adds = fast.write_files(data)
            metrics = {
                "numFiles": str(len(adds)),
                "numOutputRows": str(data.num_rows),
                "numOutputBytes": str(added_bytes(adds)),
            }
            actions: list[Mapping[str, object]] = [commit_info(metrics, custom), *adds]
            actions += [txn_action(a, v, now) for a, v in txn_ids]
            version = fast.commit(actions)
        self._storage.sync_commit(self.uri, version)

    def _after_lost_race(self, winners: Winners) -> bool:
        """After losing versions to ``winners``: whether our queued offsets moved (a fence).

        Compaction, retention and vacuum never write ``txn`` ids, other brokers only those of the
        partitions they lead: the next version is simply tried. A winner that wrote the ids of a
        partition we lead, or changed the table, makes us refresh the snapshot, check the table is
        still ours to write and move queued records behind another writer's.
        """
        ours = {partition_app_id(self.topic, p) for p in list(self._parts) if self.leads(p)}
        ours |= {epoch_app_id(self.topic, p) for p in list(self._parts) if self.leads(p)}
        if not ours & winners.txns.keys() and not winners.changed_table:
            return False  # other brokers write only the partitions they lead: no concern of ours
        self._refresh_snapshot()
        if winners.changed_table:
            self._check_table(self._dt)
        return self._rebase_if_fenced()

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
