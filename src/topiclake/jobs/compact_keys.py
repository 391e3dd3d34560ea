"""Key compaction for ``cleanup.policy=compact`` (and ``compact,delete``): the latest record per key.

Like Kafka's log cleaner, per partition:

- the cleanable range is the sealed segments from the log start up to (not including) the first segment
  that holds a record newer than ``min.compaction.lag.ms``, and never the active (newest) segment;
- within it, for every key, only the record with the highest offset is kept: older records of the key are
  dropped. A newer record of the key in the active segment or beyond the lag does NOT make older copies
  droppable (Kafka builds its offset map from the cleanable section only);
- a tombstone (null value) that is the latest of its key is dropped once its timestamp is older than
  ``delete.retention.ms`` (consumers had that long to see it);
- records with a null key are never touched; kept records keep their offsets (gaps are left).

The segments that lose records are rewritten in ONE Delta commit per topic: a ``replaceWhere`` overwrite
of those (partition, segment) pairs with their surviving records, sorted by offset. The decision is taken
inside the transaction, on the snapshot Delta reads and checks: if anything else changes those segments
first, the commit fails and is planned again. (A ``MERGE ... WHEN MATCHED THEN DELETE`` would be as safe
but writes the surviving rows of touched files in join order, not offset order.)

``python -m topiclake.jobs.compact_keys --warehouse ./data --topic users [--now-ms N]``
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topiclake.jobs._commit import read_files, rewrite, uses_put_if_absent
from topiclake.jobs._tables import (
    commit_metrics,
    load_index,
    new_tag,
    rewrite_segments,
    segment_predicate,
    segments_of,
    size_of,
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
from topiclake.jobs.compact import DEFAULT_TARGET_FILE_BYTES
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.log.file_index import FileIndex
from topiclake.platform.storage import Storage
from topiclake.sparkenv.s3a import spark_path

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

logger = logging.getLogger(__name__)

NAME = "compact-keys"


@dataclass(frozen=True, kw_only=True)
class CompactKeysConfig(JobConfig):
    """Settings of the key compaction job.

    Attributes:
        now_ms: The clock, in ms since the epoch (None: the current time).
        target_file_bytes: Size of the files written.
    """

    now_ms: int | None = None
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> CompactKeysConfig:
        """The config from :func:`parser`'s arguments."""
        return cls(**cls.common(ns), now_ms=ns.now_ms)


def parser() -> argparse.ArgumentParser:
    """Arguments of the key compaction job."""
    p = base_parser("compact_keys", "Keep the latest record per key of compacted topics (Kafka's cleaner).")
    p.add_argument(
        "--now-ms", type=non_negative_int, metavar="N", help="the clock in ms since the epoch (default: now)"
    )
    return p


def cleanable(index: FileIndex, partitions: int, config: TopicConfig, now_ms: int) -> dict[int, list[int]]:
    """The cleanable segments of each partition (see the module docstring)."""
    horizon = now_ms - config.min_compaction_lag_ms
    out: dict[int, list[int]] = {}
    for p in range(partitions):
        segments = list(segments_of(index, p).items())[:-1]  # never the active segment
        chosen: list[int] = []
        for segment, files in segments:
            stamps = [f.max_timestamp_us for f in files]
            if any(s is None for s in stamps) or max(s for s in stamps if s is not None) // 1000 > horizon:
                break  # this segment and every later one are too young
            chosen.append(segment)
        if chosen:
            out[p] = chosen
    return out


def keep_condition(frame: DataFrame, tombstone_horizon_ms: int) -> tuple[DataFrame, Column]:
    """``frame`` with the column ``_latest`` (the highest offset of the row's key in ``frame``) and the
    condition of the rows kept."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = F.max("offset").over(Window.partitionBy("partition", "key"))
    with_latest = frame.withColumn("_latest", latest)
    is_latest = F.col("offset") == F.col("_latest")
    old_tombstone = F.col("value").isNull() & (F.unix_millis("timestamp") < F.lit(tombstone_horizon_ms))
    keep = F.col("key").isNull() | (is_latest & ~old_tombstone)
    return with_latest, keep


def run(spark: SparkSession, config: CompactKeysConfig, progress: Progress | None = None) -> JobResult:
    """Compact by key every topic of ``config`` whose cleanup.policy contains ``compact``."""
    started = time.monotonic()
    progress = progress or LogProgress()
    storage = config.storage()
    infos = topic_infos(storage, config.topics)
    result = JobResult(NAME)
    for topic in config.topics:
        info = infos[topic]
        out = TopicResult(topic, partitions=info.partitions)
        if not info.config.is_compacted:
            out.skipped = f"cleanup.policy={info.config.cleanup_policy}"
            result.topics.append(out)
            continue
        progress.start(f"compact-keys {topic}", 3)
        now_ms = config.now_ms if config.now_ms is not None else time.time_ns() // 1_000_000
        with topic_lease(storage, topic, NAME, kind="rewrite"):
            _, index = load_index(storage, topic)
            out.files_before, out.bytes_before = size_of(index)
            progress.advance("planned")

            def attempt(topic: str = topic, now_ms: int = now_ms) -> dict[str, int]:
                info = infos[topic]
                return _compact_topic(spark, storage, topic, info.partitions, info.config, now_ms, config)

            done, out.retries = retry_conflicts(attempt, topic=topic, what="key compaction")
            out.commits = done["commits"]
            out.records_removed = done["removed"]
            out.details["segments_rewritten"] = done["segments"]
            progress.advance(f"{done['removed']} records removed")
            out.record_end(storage, topic, info.partitions)
            progress.advance("done")
        logger.info("%s", out.summary())
        result.topics.append(out)
    result.seconds = time.monotonic() - started
    return result


def _compact_topic(
    spark: SparkSession,
    storage: Storage,
    topic: str,
    partitions: int,
    topic_config: TopicConfig,
    now_ms: int,
    config: CompactKeysConfig,
) -> dict[str, int]:
    """Plan on a fresh snapshot and commit once: the segments losing records, rewritten."""
    from pyspark.sql import functions as F

    _, index = load_index(storage, topic)
    ranges = cleanable(index, partitions, topic_config, now_ms)
    if not ranges:
        logger.info("topic %s: nothing cleanable yet", topic)
        return {"commits": 0, "removed": 0, "segments": 0}
    uri = storage.topic_uri(topic)
    horizon = now_ms - topic_config.delete_retention_ms

    window = [f for p, segs in ranges.items() for f in index.files(p) if f.segment in set(segs)]
    put_if_absent = uses_put_if_absent(storage)

    def table() -> DataFrame:
        if put_if_absent:  # exactly the files planned on: the commit removes these (jobs/_commit.py)
            return read_files(spark, storage, uri, window)
        return spark.read.format("delta").load(spark_path(uri)).where(segment_predicate(ranges))

    with_latest, keep = keep_condition(table(), horizon)
    losing = with_latest.where(~keep).groupBy("partition", "segment").count().collect()
    if not losing:
        logger.info("topic %s: every key in the cleanable range has one record", topic)
        return {"commits": 0, "removed": 0, "segments": 0}
    affected: dict[int, list[int]] = {}
    for row in losing:
        affected.setdefault(int(row["partition"]), []).append(int(row["segment"]))
    planned = sum(int(row["count"]) for row in losing)
    files = [f for p, segs in affected.items() for f in index.files(p) if f.segment in set(segs)]
    records = sum(f.num_records for f in files)
    size = sum(f.size_bytes for f in files)
    logger.info(
        "topic %s: dropping %d records from %d segments (cleanable: %s)",
        topic,
        planned,
        len(losing),
        {p: f"{s[0]}..{s[-1]}" for p, s in ranges.items()},
    )
    # Decided again inside the transaction, on the snapshot Delta reads and checks.
    with_latest, keep = keep_condition(table(), horizon)
    touched = F.expr(segment_predicate(affected))
    survivors = with_latest.where(keep & touched).drop("_latest")
    tag = new_tag("compact-keys")
    if put_if_absent:  # object store: Spark writes the survivors, the commit is ours
        written = rewrite(
            survivors,
            storage,
            topic,
            index.version,
            files,
            data_change=True,
            records_per_file=int(config.target_file_bytes / max(size / max(records, 1), 1.0)),
            segments=sum(len(s) for s in affected.values()),
            operation="WRITE",
            tag=tag,
            expect_records=records - planned,
        )
        return {
            "commits": 1,
            "removed": records - written,
            "segments": sum(len(s) for s in affected.values()),
        }
    rewrite_segments(
        survivors,
        uri,
        affected,
        data_change=True,
        target_file_bytes=config.target_file_bytes,
        bytes_per_record=size / max(records, 1),
        tag=tag,
    )
    metrics = commit_metrics(storage, uri, tag) or {}
    removed = planned
    if "numDeletedRows" in metrics and "numOutputRows" in metrics:
        removed = int(metrics["numDeletedRows"]) - int(metrics["numOutputRows"])
    return {"commits": 1, "removed": removed, "segments": sum(len(s) for s in affected.values())}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.compact_keys ...`` (and ``spark-submit .../compact_keys.py ...``)."""
    return run_main(NAME, argv, parser(), CompactKeysConfig.from_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
