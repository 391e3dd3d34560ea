"""A maintenance round's compaction (split from :mod:`.maintenance`): which runs of small files it merges
(:mod:`.compaction_runs`), where their records come from (the tail caches, the files) and how the round
commits (one log entry a round on the local and object-store append paths, a delta-rs predicate overwrite
per run otherwise)."""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, write_deltalake

from topiclake.platform.config import BrokerConfig
from topiclake.platform.log._local_compaction import commit_rewrites
from topiclake.platform.log.compaction_runs import Run, disjoint_runs, run_records, tier
from topiclake.platform.log.file_index import DataFile, FileIndex
from topiclake.platform.log.object_state import ObjectTableState
from topiclake.platform.storage.leases import LeaseKind

logger = logging.getLogger("topiclake.platform.log.maintenance")

#: A maintenance round's rewrites committed in one log entry: (table version read, [(files, records)]) ->
#: False when another writer removed one of the files first.
Rewrites = Callable[[int, list[tuple[list[DataFile], pa.Table]]], bool]
#: The records of a run's newest files the tail caches hold whole, and the older files they do not hold.
Held = Callable[[list[DataFile], int, int], tuple[list[DataFile], pa.Table] | None]


@dataclass
class MaintenanceStats:
    """What maintenance did to one table (for metrics, benchmarks and tests)."""

    #: Upper bounds of the round-duration histogram (``topiclake_topic_maintenance_round_seconds``).
    ROUND_BOUNDS_S: ClassVar[tuple[float, ...]] = (
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        30,
        math.inf,
    )

    checkpoints: int = 0
    cleanups_held: int = 0
    compactions_held: int = 0
    index_builds: int = 0  # file indexes built by compaction rounds (none for a table that did not change)
    rounds: int = 0
    compactions: int = 0  # runs merged (one per tier of a segment)
    compaction_commits: int = 0  # log entries they took (one a round on the local append path)
    runs_from_memory: int = 0  # runs whose records came from the tail caches, no file read back
    runs_partly_from_memory: int = 0  # S3: runs whose older files were read back, the rest from the tails
    compactions_dropped: int = 0  # rounds whose rewrite lost to another rewrite of the same files
    files_removed: int = 0
    files_added: int = 0
    vacuums: int = 0
    vacuums_skipped: int = 0  # S3: vacuums not run, no tombstone having come of age since the last one
    failures: int = 0
    last_error: str | None = None
    last_checkpoint_version: int = -1
    durations_ms: list[float] = field(default_factory=list)  # the last 1,000 rounds
    #: every round's duration, counted under the first of ``ROUND_BOUNDS_S`` it is within (a histogram)
    round_counts: list[int] = field(default_factory=lambda: [0] * len(MaintenanceStats.ROUND_BOUNDS_S))
    round_seconds: float = 0.0  # all rounds together

    def count_round(self, seconds: float) -> None:
        """Remember one round's duration."""
        self.durations_ms.append(seconds * 1000)
        del self.durations_ms[:-1000]
        self.round_counts[bisect.bisect_left(self.ROUND_BOUNDS_S, seconds)] += 1
        self.round_seconds += seconds


class CompactionRound:
    """The compaction part of :class:`~.maintenance.TableMaintainer` (which sets these attributes)."""

    topic: str
    uri: str
    stats: MaintenanceStats
    _config: BrokerConfig
    _local: bool
    _leads: Callable[[int], bool]
    _held: Held | None
    _object_rewrites: Rewrites | None
    _state: tuple[ObjectTableState, Callable[[int], bytes | None]] | None
    _last_compaction_version: int
    _held_version: int

    def _leases(self, kind: LeaseKind | None = None) -> list[dict[str, object]]:
        raise NotImplementedError

    def _fs(self) -> Any:
        raise NotImplementedError

    def _compact(self, version: int, build: Callable[[], FileIndex], dt: DeltaTable | None) -> None:
        if version == self._last_compaction_version:
            return
        if version == self._held_version:  # nothing new since a rewrite lease held it: no index rebuilt
            if self._leases("rewrite"):
                self.stats.compactions_held += 1
                return
            self._held_version = -1
        fs = self._fs()
        index = build()
        self.stats.index_builds += 1
        runs: list[Run] = []
        for partition in index.partitions():
            if not self._leads(partition):
                continue
            by_segment: dict[int, list[DataFile]] = {}
            for f in index.files(partition):
                by_segment.setdefault(f.segment, []).append(f)
            for files in by_segment.values():
                runs += disjoint_runs(files, self.pick_runs(files))
        if runs and self._leases("rewrite"):
            # a Spark job rewrites this topic: our millisecond commits would win every race against its
            # seconds-long rewrite; the next round after its lease is gone compacts what is left
            self.stats.compactions_held += 1
            self._held_version = version
            return
        self._last_compaction_version = version
        if not runs:
            return
        if self._local:  # every run of the round in one commit (one link beside hundreds of appends)
            self._rewrite_round(version, fs, runs, lambda v, rw: commit_rewrites(self.uri, v, rw))
        elif self._object_rewrites is not None:  # the same on S3: one conditional PUT a round
            self._rewrite_round(version, fs, runs, self._object_rewrites)
        else:
            assert dt is not None
            for run in runs:  # other partitions' files are untouched by a rewrite: the index stays valid
                self._rewrite(dt, fs, run)

    def pick_runs(self, files: list[DataFile]) -> list[list[DataFile]]:
        """The runs of files of one segment to merge now: one per full tier, lowest tier first.

        Tiered, as in an LSM tree: a file's tier is floor(log_N(records)) with N = ``compact_min_files``;
        when a tier holds N or more files, they are all merged into one file of a higher tier. Every record
        is thus rewritten about log_N(records per full file) times, never once per round, and between
        rounds a segment holds at most N - 1 files per tier plus full-size files and what was committed
        during the round. Every full tier is merged in the same round: when appends fill tier 0 in every
        round (one file per partition per commit, dozens of commits per round under load), merging only
        the lowest full tier would leave each higher tier to grow by one file a round, without bound.
        """
        n = self._config.compact_min_files
        small = self._config.compact_target_bytes // 4
        tiers: dict[int, list[DataFile]] = {}
        for f in files:
            if f.size_bytes < small:
                tiers.setdefault(tier(max(f.num_records, 1), n), []).append(f)
        return [sorted(tiers[t], key=lambda f: f.min_offset) for t in sorted(tiers) if len(tiers[t]) >= n]

    def pick_run(self, files: list[DataFile]) -> list[DataFile]:
        """The files of the lowest full tier of one segment (see :meth:`pick_runs`), or none."""
        runs = self.pick_runs(files)
        return runs[0] if runs else []

    def _rewrite_round(self, version: int, fs: Any, runs: list[Run], commit: Rewrites) -> None:
        """Rewrite every run of the round as one log entry (see :mod:`._local_compaction`)."""
        rewrites = [(run.inside, self._records(fs, run)) for run in runs]
        if not commit(version, rewrites):
            self.stats.compactions_dropped += 1
            logger.info("topic %s: compaction dropped, some of its files were rewritten first", self.topic)
            return
        self.stats.compaction_commits += 1
        for run, (_inside, data) in zip(runs, rewrites, strict=True):
            self._count(run, data.num_rows)

    def _records(self, fs: Any, run: Run) -> pa.Table:
        """The records of ``run``: from memory when the broker holds them all, else read from its files
        (on S3 only the older files the tail caches no longer hold)."""
        held = self._held(run.inside, run.lo, run.hi) if self._held is not None else None
        if held is not None and not held[0]:
            self.stats.runs_from_memory += 1
            return held[1]
        if self._state is not None:  # S3: one GET a file, not pyarrow's HEAD and ranged GETs
            if held is None:
                return self._state[0].read_run(run.inside, run.lo, run.hi)
            older, newer = held
            first_held = int(newer["offset"][0].as_py())
            read = self._state[0].read_run(older, run.lo, first_held - 1)
            if not read.schema.equals(newer.schema):  # the tail's tables are the topic schema's too
                return self._state[0].read_run(run.inside, run.lo, run.hi)
            self.stats.runs_partly_from_memory += 1
            return pa.concat_tables([read, newer])
        return run_records(fs, run)

    def _rewrite(self, dt: DeltaTable, fs: Any, run: Run) -> None:
        """Replace the records of one offset range of a (partition, segment) by the same records, sorted
        by offset, in as few files as the target size allows.

        delta-rs ``optimize.compact`` is not used: in deltalake 1.6.6 it does not check for a concurrent
        or earlier rewrite of the files it read (two compactions of the same files both commit, and every
        record is then there twice) and it ignores ``txn`` actions. A predicate overwrite has that check:
        if anything else rewrote or deleted those records since our snapshot, this commit fails and the
        next round starts again. Appends to the partition commit beside it after one retry.
        """
        data = run_records(fs, run)
        predicate = (
            f"partition = {run.partition} AND segment = {run.segment} "
            f"AND offset >= {run.lo} AND offset <= {run.hi}"
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
        self.stats.compaction_commits += 1
        self._count(run, data.num_rows)

    def _count(self, run: Run, records: int) -> None:
        self.stats.compactions += 1
        self.stats.files_removed += len(run.inside)
        self.stats.files_added += 1
        logger.info(
            "topic %s partition %d segment %d: compacted %d files (offsets %d-%d, %d records)",
            self.topic,
            run.partition,
            run.segment,
            len(run.inside),
            run.lo,
            run.hi,
            records,
        )
