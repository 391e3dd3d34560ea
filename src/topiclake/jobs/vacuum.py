"""VACUUM and log upkeep: delete data files no version needs any more, checkpoint, and trim ``_delta_log``.

Per topic: Spark's ``VACUUM delta.`<table>` RETAIN <H> HOURS`` deletes data files that compaction,
retention and key compaction removed from the table more than ``--retention-hours`` ago; then a Delta
checkpoint is written and log entries older than the checkpoint and than the table's
``delta.logRetentionDuration`` are deleted (delta-rs ``cleanup_metadata``, as the gateway's maintenance does),
unless another reader holds a log lease on the topic. VACUUM changes no data and commits only
``VACUUM START``/``VACUUM END`` entries, which the gateway's appends commit beside. On an object store
delta-rs vacuums instead (its commits are put-if-absent, Spark's are not: :mod:`topiclake.jobs._commit`).

The window must outlast every writer's commit and every reader of an older version. VACUUM deletes any
file that its snapshot does not reference and that is older than the window, so with a window of zero it
deletes the data files of a commit still in flight (the gateway's appends, a Spark job's write) and the
table then names files that are gone: data loss. A fetch whose file index predates a compaction
re-indexes when a file is gone, but a Spark query reading a snapshot for longer than the window fails. The
default, 1 hour, is the gateway's own (``vacuum_retention_hours``), and it is also the floor
(:data:`MIN_SAFE_HOURS`): a shorter window is refused unless the session has Delta's own safety check off
(``spark.databricks.delta.retentionDurationCheck.enabled=false``), which says the caller knows that
nothing writes or reads the table meanwhile (tests do).

``python -m topiclake.jobs.vacuum --warehouse ./data --topic orders [--retention-hours 1]``
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from deltalake.exceptions import DeltaError

from topiclake.errors import InvalidRequest
from topiclake.jobs._commit import uses_put_if_absent
from topiclake.jobs._tables import (
    load_index,
    open_table,
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
    run_main,
    topic_infos,
    topic_lease,
)
from topiclake.platform.storage import Storage
from topiclake.platform.storage.leases import LogLease, active_leases

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

NAME = "vacuum"
#: Default VACUUM window: the gateway's ``vacuum_retention_hours``.
DEFAULT_RETENTION_HOURS = 1
#: The shortest window accepted while Delta's retention check is on (its default).
MIN_SAFE_HOURS = 1
#: Delta's own default window (``delta.deletedFileRetentionDuration``); below it Spark refuses VACUUM
#: unless its retention check is off, which :func:`vacuum_table` does for the one statement.
_DELTA_DEFAULT_HOURS = 168
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass(frozen=True, kw_only=True)
class VacuumConfig(JobConfig):
    """Settings of the vacuum job.

    Attributes:
        retention_hours: Keep files unreferenced for less than this.
    """

    retention_hours: int = DEFAULT_RETENTION_HOURS

    def check(self) -> None:
        """Fail fast on bad settings and unknown topics."""
        super().check()
        check_hours(self.retention_hours, "--retention-hours")

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> VacuumConfig:
        """The config from :func:`parser`'s arguments."""
        return cls(**cls.common(ns), retention_hours=ns.retention_hours)


def check_hours(value: object, option: str) -> None:
    """A VACUUM window must be a whole number of hours >= 0 (Delta rounds fractions: 0.01 h is 0 ms).

    Raises:
        InvalidRequest: It is not.
    """
    if not isinstance(value, int):
        raise InvalidRequest(f"{option} must be a whole number (Delta rounds fractions)")
    if value < 0:
        raise InvalidRequest(f"{option} must not be negative")


def hours(text: str) -> int:
    """argparse type: a whole number of hours >= 0 (Delta's VACUUM rounds fractions: 0.01 h is 0 ms)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of hours") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def parser() -> argparse.ArgumentParser:
    """Arguments of the vacuum job."""
    p = base_parser(NAME, "VACUUM unreferenced data files, checkpoint and trim the Delta log.")
    p.add_argument(
        "--retention-hours",
        type=hours,
        default=DEFAULT_RETENTION_HOURS,
        metavar="H",
        help=f"keep files unreferenced for less than H hours (default {DEFAULT_RETENTION_HOURS})",
    )
    return p


def check_window(spark: SparkSession, retention_hours: int) -> None:
    """Refuse a window below :data:`MIN_SAFE_HOURS` unless Delta's retention check is off in the session.

    Raises:
        InvalidRequest: The window is unsafe.
    """
    check = str(spark.conf.get(_RETENTION_CHECK, "true")).strip().lower()
    if retention_hours < MIN_SAFE_HOURS and check != "false":
        raise InvalidRequest(
            f"a VACUUM window of {retention_hours} hours is below the safe minimum of {MIN_SAFE_HOURS}: "
            "files of commits in flight and of snapshots still being read would be deleted. Only when "
            f"nothing writes or reads the topic, set {_RETENTION_CHECK}=false in the Spark session"
        )


def vacuum_table(spark: SparkSession, storage: Storage, uri: str, retention_hours: int) -> int:
    """``VACUUM`` one table with Spark (on an object store with delta-rs, whose commits are conditional);
    returns how many files it deleted (-1 if unknown).

    Raises:
        InvalidRequest: The window is unsafe (:func:`check_window`).
    """
    check_window(spark, retention_hours)
    if uses_put_if_absent(storage):
        # Spark's VACUUM commits VACUUM START/END without a conditional PUT on S3; delta-rs's commits
        # with one. Full: also files a job or broker wrote but never committed, by modification time.
        deleted = open_table(storage, uri).vacuum(
            retention_hours=int(retention_hours), dry_run=False, enforce_retention_duration=False, full=True
        )
        return len(deleted)
    before = open_table(storage, uri).version()
    check = spark.conf.get(_RETENTION_CHECK, None)
    lowered = retention_hours < _DELTA_DEFAULT_HOURS
    if lowered:
        spark.conf.set(_RETENTION_CHECK, "false")
    try:
        spark.sql(f"VACUUM {sql_table(uri)} RETAIN {int(retention_hours)} HOURS").collect()
    finally:
        if lowered:
            if check is None:
                spark.conf.unset(_RETENTION_CHECK)
            else:
                spark.conf.set(_RETENTION_CHECK, check)
    dt = open_table(storage, uri)
    newer = dt.version() - before
    for commit in dt.history(max(newer, 1)) if newer > 0 else []:
        if commit.get("operation") == "VACUUM END":
            metrics = commit.get("operationMetrics") or {}
            return int(metrics.get("numDeletedFiles", -1))
    return -1


def log_files(storage: Storage, uri: str) -> int:
    """Commit files (``*.json``) in the table's ``_delta_log``."""
    fs = storage.filesystem(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector("_delta_log", allow_not_found=True))
    except OSError:
        return 0
    return sum(1 for i in infos if i.type == pafs.FileType.File and i.path.endswith(".json"))


def checkpoint_and_trim(storage: Storage, topic: str, lease: LogLease | None) -> tuple[int, int]:
    """Write a checkpoint of the topic table and delete expired log entries unless another reader holds
    a log lease. Returns the number of log entries before and after."""
    uri = storage.topic_uri(topic)
    before = log_files(storage, uri)
    dt = open_table(storage, uri)
    try:
        dt.create_checkpoint()
        others = [
            held
            for held in active_leases(storage, topic)
            if lease is None or held.get("holder") != lease.holder
        ]
        if others:
            logger.info(
                "topic %s: checkpoint written; log kept whole for %d other lease(s)", topic, len(others)
            )
        else:
            dt.cleanup_metadata()
            logger.info(
                "topic %s: checkpoint at version %d, expired log entries removed", topic, dt.version()
            )
    except (DeltaError, OSError) as exc:  # a concurrent checkpoint or cleanup: the next run does it
        logger.warning("topic %s: checkpoint or log cleanup failed: %s", topic, exc)
    return before, log_files(storage, uri)


def vacuum_topic(
    spark: SparkSession, storage: Storage, topic: str, retention_hours: int, lease: LogLease | None
) -> dict[str, int]:
    """VACUUM, checkpoint and trim the log of one topic (the caller holds ``lease``)."""
    deleted = vacuum_table(spark, storage, storage.topic_uri(topic), retention_hours)
    logs_before, logs_after = checkpoint_and_trim(storage, topic, lease)
    logger.info(
        "topic %s: vacuum deleted %d files; log entries %d -> %d", topic, deleted, logs_before, logs_after
    )
    return {"files_vacuumed": deleted, "log_entries_before": logs_before, "log_entries_after": logs_after}


def run(spark: SparkSession, config: VacuumConfig, progress: Progress | None = None) -> JobResult:
    """VACUUM every topic of ``config``, checkpoint it and trim its log."""
    started = time.monotonic()
    progress = progress or LogProgress()
    check_window(spark, config.retention_hours)
    storage = config.storage()
    infos = topic_infos(storage, config.topics)
    result = JobResult(NAME)
    for topic in config.topics:
        progress.start(f"vacuum {topic}", 2)
        with topic_lease(storage, topic, NAME) as lease:
            _, index = load_index(storage, topic)
            out = TopicResult(topic, partitions=infos[topic].partitions)
            out.files_before, out.bytes_before = size_of(index)
            done = vacuum_topic(spark, storage, topic, config.retention_hours, lease)
            progress.advance("vacuumed")
            out.details["files_vacuumed"] = done["files_vacuumed"]
            out.details["log_entries"] = f"{done['log_entries_before']} -> {done['log_entries_after']}"
            out.record_end(storage, topic, infos[topic].partitions)
            progress.advance("checkpointed")
        result.topics.append(out)
    result.seconds = time.monotonic() - started
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.vacuum ...`` (and ``spark-submit .../vacuum.py ...``)."""
    return run_main(NAME, argv, parser(), VacuumConfig.from_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
