"""Retention: delete whole old sealed segments by ``retention.ms`` and ``retention.bytes``, like Kafka.

For every topic whose ``cleanup.policy`` contains ``delete``, per partition (segments in offset order; the
newest segment in the table is the active one and is never deleted):

- by time (``retention.ms`` >= 0): the oldest sealed segments whose largest record timestamp is older
  than ``now - retention.ms``, stopping at the first segment that is not (Kafka deletes a prefix too);
- by size (``retention.bytes`` >= 0): the oldest sealed segments while the partition's data files hold
  more than ``retention.bytes`` bytes (Parquet bytes in the table);
- the union of both: the longer prefix.

``-1`` means unlimited for either. All deleted segments of a topic go in ONE Delta commit, a ``DELETE``
whose predicate names partition columns only (``partition = p AND segment IN (...)``), which Delta runs as
a metadata-only delete: files are removed from the table, none rewritten. The log start offset of a
partition becomes the first offset of its oldest remaining segment; the high watermark (a ``txn`` action)
is never touched, so offsets are never reused. Then, unless ``--no-vacuum``, the files are VACUUMed
after ``--vacuum-retention-hours``, a checkpoint is written and the Delta log is trimmed
(:mod:`topiclake.jobs.vacuum`).

``python -m topiclake.jobs.retention --warehouse ./data --topic orders [--now-ms N] [--no-vacuum]``
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topiclake.jobs._commit import commit, uses_put_if_absent
from topiclake.jobs._tables import (
    load_index,
    new_tag,
    segment_predicate,
    segments_of,
    size_of,
    sql_table,
)
from topiclake.jobs.common import (
    JobConfig,
    JobResult,
    LogProgress,
    Progress,
    TopicResult,
    base_parser,
    non_negative_int,
    retry_conflicts,
    run_main,
    topic_infos,
    topic_lease,
)
from topiclake.jobs.vacuum import DEFAULT_RETENTION_HOURS, check_hours, check_window, hours, vacuum_topic
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.log.file_index import DataFile, FileIndex

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

NAME = "retention"


@dataclass(frozen=True, kw_only=True)
class RetentionConfig(JobConfig):
    """Settings of the retention job.

    Attributes:
        now_ms: The clock, in ms since the epoch (None: the current time).
        vacuum: VACUUM, checkpoint and trim the log after deleting.
        vacuum_retention_hours: The VACUUM window.
    """

    now_ms: int | None = None
    vacuum: bool = True
    vacuum_retention_hours: int = DEFAULT_RETENTION_HOURS

    def check(self) -> None:
        """Fail fast on bad settings and unknown topics."""
        super().check()
        check_hours(self.vacuum_retention_hours, "--vacuum-retention-hours")

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> RetentionConfig:
        """The config from :func:`parser`'s arguments."""
        return cls(
            **cls.common(ns),
            now_ms=ns.now_ms,
            vacuum=not ns.no_vacuum,
            vacuum_retention_hours=ns.vacuum_retention_hours,
        )


def parser() -> argparse.ArgumentParser:
    """Arguments of the retention job."""
    p = base_parser(NAME, "Delete old sealed segments by retention.ms and retention.bytes, then VACUUM.")
    p.add_argument(
        "--now-ms", type=non_negative_int, metavar="N", help="the clock in ms since the epoch (default: now)"
    )
    p.add_argument(
        "--vacuum-retention-hours",
        type=hours,
        default=DEFAULT_RETENTION_HOURS,
        metavar="H",
        help=f"VACUUM files unreferenced for H hours (default {DEFAULT_RETENTION_HOURS})",
    )
    p.add_argument("--no-vacuum", action="store_true", help="do not VACUUM, checkpoint or trim the log")
    return p


@dataclass(frozen=True)
class Expired:
    """The segments retention deletes from one partition, and why."""

    partition: int
    segments: list[int]
    by_time: int
    by_size: int
    records: int
    bytes: int


def _max_timestamp_ms(files: list[DataFile]) -> int | None:
    stamps = [f.max_timestamp_us for f in files]
    if any(s is None for s in stamps):
        return None  # no statistics: never expire by time
    return max(s for s in stamps if s is not None) // 1000


def plan(index: FileIndex, partitions: int, config: TopicConfig, now_ms: int) -> list[Expired]:
    """Which sealed segments of each partition retention deletes now (Kafka's rules, see the module)."""
    out: list[Expired] = []
    for p in range(partitions):
        segments = list(segments_of(index, p).items())
        sealed = segments[:-1]  # the newest segment is the active one
        by_time = 0
        if config.retention_ms >= 0:
            horizon = now_ms - config.retention_ms
            for _, files in sealed:
                newest = _max_timestamp_ms(files)
                if newest is None or newest >= horizon:
                    break
                by_time += 1
        by_size = 0
        if config.retention_bytes >= 0:
            total = sum(f.size_bytes for _, files in segments for f in files)
            for _, files in sealed:
                if total <= config.retention_bytes:
                    break
                total -= sum(f.size_bytes for f in files)
                by_size += 1
        n = max(by_time, by_size)
        if n:
            gone = sealed[:n]
            out.append(
                Expired(
                    partition=p,
                    segments=[s for s, _ in gone],
                    by_time=by_time,
                    by_size=by_size,
                    records=sum(f.num_records for _, files in gone for f in files),
                    bytes=sum(f.size_bytes for _, files in gone for f in files),
                )
            )
    return out


def run(spark: SparkSession, config: RetentionConfig, progress: Progress | None = None) -> JobResult:
    """Apply retention to every topic of ``config`` whose cleanup.policy contains ``delete``."""
    started = time.monotonic()
    progress = progress or LogProgress()
    if config.vacuum:
        check_window(spark, config.vacuum_retention_hours)
    storage = config.storage()
    infos = topic_infos(storage, config.topics)
    result = JobResult(NAME)
    for topic in config.topics:
        info = infos[topic]
        out = TopicResult(topic, partitions=info.partitions)
        if not info.config.is_deleting:
            out.skipped = f"cleanup.policy={info.config.cleanup_policy}"
            result.topics.append(out)
            continue
        progress.start(f"retention {topic}", 3 if config.vacuum else 2)
        with topic_lease(storage, topic, NAME, kind="rewrite") as lease:
            _, index = load_index(storage, topic)
            out.files_before, out.bytes_before = size_of(index)
            now_ms = config.now_ms if config.now_ms is not None else time.time_ns() // 1_000_000

            def attempt(topic: str = topic, now_ms: int = now_ms) -> tuple[list[Expired], int]:
                _, index = load_index(storage, topic)
                expired = plan(index, infos[topic].partitions, infos[topic].config, now_ms)
                if not expired:
                    return [], 0
                predicate = segment_predicate({e.partition: e.segments for e in expired})
                uri = storage.topic_uri(topic)
                for e in expired:
                    logger.info(
                        "topic %s partition %d: deleting segments %s (%d records, %d bytes; %d by time, "
                        "%d by size)",
                        topic,
                        e.partition,
                        e.segments,
                        e.records,
                        e.bytes,
                        e.by_time,
                        e.by_size,
                    )
                if uses_put_if_absent(storage):  # object store: the removes in one put-if-absent entry
                    gone = [
                        f for e in expired for f in index.files(e.partition) if f.segment in set(e.segments)
                    ]
                    records = sum(f.num_records for f in gone)
                    metrics = {"numRemovedFiles": len(gone), "numDeletedRows": records}
                    commit(
                        storage,
                        topic,
                        index.version,
                        gone,
                        [],
                        operation="DELETE",
                        data_change=True,
                        metrics=metrics,
                        tag=new_tag(NAME),
                    )
                    return expired, records
                rows = spark.sql(f"DELETE FROM {sql_table(uri)} WHERE {predicate}").collect()
                affected = rows[0][0] if rows and rows[0][0] is not None and rows[0][0] >= 0 else None
                return expired, int(affected) if affected is not None else sum(e.records for e in expired)

            (expired, removed), out.retries = retry_conflicts(attempt, topic=topic, what="retention delete")
            out.commits = 1 if expired else 0
            out.records_removed = removed
            out.details["segments_deleted"] = sum(len(e.segments) for e in expired)
            progress.advance(f"{out.details['segments_deleted']} segments deleted")
            if config.vacuum:
                done = vacuum_topic(spark, storage, topic, config.vacuum_retention_hours, lease)
                out.details["files_vacuumed"] = done["files_vacuumed"]
                out.details["log_entries"] = f"{done['log_entries_before']} -> {done['log_entries_after']}"
                progress.advance("vacuumed")
            out.record_end(storage, topic, info.partitions)
            progress.advance("done")
        logger.info("%s", out.summary())
        result.topics.append(out)
    result.seconds = time.monotonic() - started
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.retention ...`` (and ``spark-submit .../retention.py ...``)."""
    return run_main(NAME, argv, parser(), RetentionConfig.from_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
