"""Small-file compaction: rewrite each segment's many small files into few large ones, sorted by offset.

For every (partition, segment) with at least ``--min-files`` data files that would fit in fewer files of
``--target-file-bytes``, the segment's records are rewritten, sorted by offset, into files of about that
size. All chosen segments of a topic go in ONE Delta commit that changes no data (``dataChange=false``):
a ``replaceWhere`` overwrite on the partition columns, checked by Delta under snapshot isolation, so the
gateway's appends commit beside it and a concurrent rewrite of the same files (the gateway's own
compaction, another job) makes it fail and start again from a fresh snapshot. No record is added, lost or
changed; offsets stay as they are.

Why not ``OPTIMIZE``: measured with delta-spark 4.4.0, bin-packing OPTIMIZE writes a segment's records in
the order of its scan (largest file first), e.g. offsets ``5-9, 15-24, 10-14, 0-4`` in one file; and
``ZORDER BY (offset)`` sorts by a coarse range id, not by offset. The rewrite here sorts exactly.

``python -m topiclake.jobs.compact --warehouse ./data --topic orders [--partition 0] [--min-files 2]``
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topiclake.errors import InvalidRequest
from topiclake.jobs._commit import read_files, rewrite, uses_put_if_absent
from topiclake.jobs._tables import (
    commit_metrics,
    load_index,
    new_tag,
    rewrite_segments,
    segment_predicate,
    segments_of,
    size_of,
    target_file_count,
)
from topiclake.jobs.common import (
    JobConfig,
    JobResult,
    LogProgress,
    Progress,
    TopicResult,
    add_partition_argument,
    base_parser,
    check_partitions,
    positive_int,
    retry_conflicts,
    run_main,
    topic_infos,
    topic_lease,
)
from topiclake.platform.log.file_index import DataFile, FileIndex
from topiclake.sparkenv.s3a import spark_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

NAME = "compact"
#: Default size of a compacted file: the gateway's own compaction target.
DEFAULT_TARGET_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_MIN_FILES = 2


@dataclass(frozen=True, kw_only=True)
class CompactConfig(JobConfig):
    """Settings of the compaction job.

    Attributes:
        partitions: Only these partitions (empty: all).
        target_file_bytes: Size of the files written.
        min_files: A segment is compacted only when it has at least this many files.
    """

    partitions: tuple[int, ...] = ()
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    min_files: int = DEFAULT_MIN_FILES

    def check(self) -> None:
        """Fail fast on bad settings, unknown topics and partitions."""
        super().check()
        if self.target_file_bytes < 1:
            raise InvalidRequest("--target-file-bytes must be at least 1")
        if self.min_files < 1:
            raise InvalidRequest("--min-files must be at least 1")
        check_partitions(self.storage(), self.topics, self.partitions)

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> CompactConfig:
        """The config from :func:`parser`'s arguments."""
        return cls(
            **cls.common(ns),
            partitions=tuple(sorted(set(ns.partitions or ()))),
            target_file_bytes=ns.target_file_bytes,
            min_files=ns.min_files,
        )


def parser() -> argparse.ArgumentParser:
    """Arguments of the compaction job."""
    p = base_parser(NAME, "Rewrite small files into large ones sorted by offset (no data change).")
    add_partition_argument(p)
    p.add_argument(
        "--target-file-bytes",
        type=positive_int,
        default=DEFAULT_TARGET_FILE_BYTES,
        metavar="N",
        help=f"size of the files written (default {DEFAULT_TARGET_FILE_BYTES})",
    )
    p.add_argument(
        "--min-files",
        type=positive_int,
        default=DEFAULT_MIN_FILES,
        metavar="N",
        help=f"compact a segment only when it has at least N files (default {DEFAULT_MIN_FILES})",
    )
    return p


def plan(
    index: FileIndex, partitions: Sequence[int], min_files: int, target_file_bytes: int
) -> dict[int, dict[int, list[DataFile]]]:
    """The segments worth compacting: partition -> segment -> its files.

    A segment is chosen when it has at least ``min_files`` files and more files than its bytes need.
    """
    chosen: dict[int, dict[int, list[DataFile]]] = {}
    for p in partitions:
        for segment, files in segments_of(index, p).items():
            needed = target_file_count(sum(f.size_bytes for f in files), target_file_bytes)
            if len(files) >= min_files and len(files) > needed:
                chosen.setdefault(p, {})[segment] = files
    return chosen


def run(spark: SparkSession, config: CompactConfig, progress: Progress | None = None) -> JobResult:
    """Compact the small files of every topic of ``config``.

    Returns:
        Files and bytes before and after per topic, and the segments rewritten.
    """
    started = time.monotonic()
    progress = progress or LogProgress()
    storage = config.storage()
    infos = topic_infos(storage, config.topics)
    result = JobResult(NAME)
    for topic in config.topics:
        info = infos[topic]
        partitions = list(config.partitions) or list(range(info.partitions))
        progress.start(f"compact {topic}", 3)
        with topic_lease(storage, topic, NAME, kind="rewrite"):
            _, index = load_index(storage, topic)
            out = TopicResult(topic, partitions=len(partitions))
            out.files_before, out.bytes_before = size_of(index)
            progress.advance("planned")

            def attempt(topic: str = topic, partitions: list[int] = partitions) -> dict[str, int]:
                _, index = load_index(storage, topic)
                chosen = plan(index, partitions, config.min_files, config.target_file_bytes)
                if not chosen:
                    return {"segments": 0, "files": 0}
                files = [f for segs in chosen.values() for fs in segs.values() for f in fs]
                records = sum(f.num_records for f in files)
                size = sum(f.size_bytes for f in files)
                segments = {p: list(segs) for p, segs in chosen.items()}
                uri = storage.topic_uri(topic)
                tag = new_tag(NAME)
                logger.info(
                    "topic %s: compacting %d files (%d records) of %d segments into files of %d bytes",
                    topic,
                    len(files),
                    records,
                    sum(len(s) for s in segments.values()),
                    config.target_file_bytes,
                )
                pairs = sum(len(s) for s in segments.values())
                if uses_put_if_absent(storage):  # object store: Spark writes files, the commit is ours
                    rewrite(
                        read_files(spark, storage, uri, files),
                        storage,
                        topic,
                        index.version,
                        files,
                        data_change=False,
                        records_per_file=int(config.target_file_bytes / max(size / max(records, 1), 1.0)),
                        segments=pairs,
                        operation="OPTIMIZE",
                        tag=tag,
                        expect_records=records,
                    )
                    return {"segments": pairs, "files": len(files), "commits": 1}
                frame = spark.read.format("delta").load(spark_path(uri)).where(segment_predicate(segments))
                rewrite_segments(
                    frame,
                    uri,
                    segments,
                    data_change=False,
                    target_file_bytes=config.target_file_bytes,
                    bytes_per_record=size / max(records, 1),
                    tag=tag,
                )
                metrics = commit_metrics(storage, uri, tag) or {}
                removed = int(metrics.get("numRemovedFiles", len(files)))
                return {"segments": sum(len(s) for s in segments.values()), "files": removed, "commits": 1}

            done, out.retries = retry_conflicts(attempt, topic=topic, what="compaction")
            out.commits = done.get("commits", 0)
            out.details["segments_compacted"] = done["segments"]
            progress.advance(f"{done['segments']} segments rewritten")
            out.record_end(storage, topic, info.partitions)
            progress.advance("done")
        logger.info("%s", out.summary())
        result.topics.append(out)
    result.seconds = time.monotonic() - started
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.compact ...`` (and ``spark-submit .../compact.py ...``)."""
    return run_main(NAME, argv, parser(), CompactConfig.from_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
