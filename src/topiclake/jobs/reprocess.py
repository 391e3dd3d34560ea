"""Reprocessing: replay a range of a topic through a transformation into another topic or a Delta table,
exactly once per job id.

The range is fixed when the job starts, per (topic, partition): ``--from-offset``/``--to-offset`` (to is
exclusive, as Spark's ``endingOffsets``), or ``--from-timestamp``/``--to-timestamp`` in ms, which become the
first offset whose timestamp is at or after each bound (Kafka's ListOffsets by time); by default from the
log start to the high watermark of that moment. Only committed records are in a topic table, so a replay
never sees an uncommitted one.

The input DataFrame has the Kafka source's columns (``key, value, topic, partition, offset, timestamp,
timestampType, headers``); the transformation (``--transform module:function``, a function
``DataFrame -> DataFrame``; default: none, records are copied) returns what is written:

- ``--to-table URI``: appended to a Delta table in one commit carrying Delta's idempotent-write
  transaction (``txnAppId=topiclake-reprocess-<job id>``, ``txnVersion=1``): a re-run of the same job id
  writes nothing (Delta skips it, and the job does not even compute it). Spark commits to a local table;
  to an object store delta-rs does, whose commit is a conditional PUT (through the driver's memory);
- ``--to-topic NAME``: appended through the ``topiclake`` sink with ``writerId=reprocess/<job id>``,
  which assigns offsets like the gateway and writes each writer id once. The output needs a ``value``
  column; ``key``, ``headers``, ``timestamp`` and ``partition`` (an explicit partition: drop it to
  partition by key) are used when present, other columns ignored.

``python -m topiclake.jobs.reprocess --topic orders --job-id fix-1 --transform mod:fix --to-topic orders-v2``
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalake.exceptions import DeltaError

from topiclake.errors import InvalidRequest, StorageError
from topiclake.jobs._commit import local_warehouse_uri, write_table_with_delta_rs
from topiclake.jobs._tables import (
    load_index,
    log_start_offsets,
    new_tag,
    open_table,
    size_of,
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
    non_negative_int,
    run_main,
    topic_infos,
    topic_lease,
)
from topiclake.platform.log.topic_log import partition_app_id
from topiclake.platform.log.topic_writer import writer_app_id
from topiclake.platform.storage import Storage
from topiclake.schemas import KAFKA_COLUMNS
from topiclake.sparkenv.s3a import configure, spark_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

NAME = "reprocess"
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")

Transform = Callable[["DataFrame"], "DataFrame"]
#: Offsets to replay: (topic, partition) -> (first offset, end offset exclusive).
Ranges = dict[tuple[str, int], tuple[int, int]]


@dataclass(frozen=True, kw_only=True)
class ReprocessConfig(JobConfig):
    """Settings of the reprocessing job.

    Attributes:
        job_id: Names the run for exactly-once: a re-run with the same id writes nothing twice.
        transform: ``module:function`` of a ``DataFrame -> DataFrame`` function; None copies records.
        to_topic: Target topic (exclusive with ``to_table``).
        to_table: Target Delta table URI (exclusive with ``to_topic``).
        partitions: Only these partitions of the source topics (empty: all).
        from_offset: First offset to replay (default: the log start).
        to_offset: Offset to stop before (default: the high watermark when the job starts).
        from_timestamp: Replay from the first record at or after this time (ms).
        to_timestamp: Stop before the first record at or after this time (ms).
    """

    job_id: str = ""
    transform: str | None = None
    to_topic: str | None = None
    to_table: str | None = None
    partitions: tuple[int, ...] = ()
    from_offset: int | None = None
    to_offset: int | None = None
    from_timestamp: int | None = None
    to_timestamp: int | None = None

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> ReprocessConfig:
        """The config from :func:`parser`'s arguments."""
        return cls(
            **cls.common(ns),
            job_id=ns.job_id,
            transform=ns.transform,
            to_topic=ns.to_topic,
            to_table=ns.to_table,
            partitions=tuple(sorted(set(ns.partitions or ()))),
            from_offset=ns.from_offset,
            to_offset=ns.to_offset,
            from_timestamp=ns.from_timestamp,
            to_timestamp=ns.to_timestamp,
        )

    def check(self) -> None:
        """Fail fast, before any Spark work: ids, target, range, topics, partitions and the transform.

        Raises:
            InvalidRequest: A bad job id, target, range or transformation.
            TopicNotFound: A source or target topic does not exist.
            PartitionNotFound: A source topic lacks a partition.
        """
        if not _JOB_ID.fullmatch(self.job_id):
            raise InvalidRequest(
                f"--job-id must be 1-200 characters from [A-Za-z0-9._-], not {self.job_id!r}"
            )
        if (self.to_topic is None) == (self.to_table is None):
            raise InvalidRequest("give exactly one of --to-topic and --to-table")
        by_offset = self.from_offset is not None or self.to_offset is not None
        by_time = self.from_timestamp is not None or self.to_timestamp is not None
        if by_offset and by_time:
            raise InvalidRequest("give offsets (--from-offset/--to-offset) or timestamps, not both")
        for lo, hi, what in (
            (self.from_offset, self.to_offset, "offset"),
            (self.from_timestamp, self.to_timestamp, "timestamp"),
        ):
            if lo is not None and hi is not None and hi < lo:
                raise InvalidRequest(f"--to-{what} {hi} is before --from-{what} {lo}")
        super().check()
        check_partitions(self.storage(), self.topics, self.partitions)
        if self.to_topic is not None:
            topic_infos(self.storage(), [self.to_topic])
        load_transform(self.transform)


def parser() -> argparse.ArgumentParser:
    """Arguments of the reprocessing job."""
    p = base_parser(NAME, "Replay a topic range through a transformation into a topic or a table, once.")
    p.add_argument("--job-id", required=True, help="names the run: a re-run with the same id writes nothing")
    p.add_argument(
        "--transform", metavar="MODULE:FUNCTION", help="a DataFrame -> DataFrame function (default: copy)"
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-topic", metavar="NAME", help="append to this topic (exactly once)")
    target.add_argument("--to-table", metavar="URI", help="append to this Delta table (exactly once)")
    add_partition_argument(p)
    p.add_argument(
        "--from-offset", type=non_negative_int, metavar="N", help="first offset (default: log start)"
    )
    p.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="stop before this offset (default: end)"
    )
    p.add_argument("--from-timestamp", type=non_negative_int, metavar="MS", help="from this time (ms)")
    p.add_argument("--to-timestamp", type=non_negative_int, metavar="MS", help="until before this time (ms)")
    return p


def load_transform(spec: str | None) -> Transform | None:
    """Import ``module:function`` (the function may be a dotted attribute path).

    Raises:
        InvalidRequest: Not ``module:function``, the module cannot be imported, or the name is not a
            callable in it.
    """
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidRequest(f"--transform must be MODULE:FUNCTION, not {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidRequest(f"--transform {spec}: cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing
        raise InvalidRequest(
            f"--transform {spec}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidRequest(f"--transform {spec}: module {module_name!r} has no {attr!r}")
    if not callable(target):
        raise InvalidRequest(f"--transform {spec}: {attr!r} is not a function")
    return target  # type: ignore[no-any-return]


def resolve_ranges(spark: SparkSession, storage: Storage, config: ReprocessConfig) -> Ranges:
    """Fix the offsets to replay, per (topic, partition), from the tables as they are now."""
    from pyspark.sql import functions as F

    infos = topic_infos(storage, config.topics)
    ranges: Ranges = {}
    for topic in config.topics:
        dt, index = load_index(storage, topic)
        partitions = list(config.partitions) or list(range(infos[topic].partitions))
        starts = log_start_offsets(dt, index, topic, infos[topic].partitions)
        firsts: dict[int, int] = {}
        stops: dict[int, int] = {}
        if config.from_timestamp is not None or config.to_timestamp is not None:
            lo = config.from_timestamp or 0
            hi = config.to_timestamp
            ts = F.unix_millis("timestamp")
            frame = spark.read.format("delta").load(spark_path(storage.topic_uri(topic)))
            frame = frame.where(F.col("partition").isin(partitions) & (ts >= F.lit(lo)))
            aggs = [F.min("offset").alias("first")]
            if hi is not None:
                aggs.append(F.min(F.when(ts >= F.lit(hi), F.col("offset"))).alias("stop"))
            for row in frame.groupBy("partition").agg(*aggs).collect():
                firsts[int(row["partition"])] = int(row["first"])
                if hi is not None and row["stop"] is not None:
                    stops[int(row["partition"])] = int(row["stop"])
        for p in partitions:
            end = dt.transaction_version(partition_app_id(topic, p)) or 0
            if config.from_timestamp is not None or config.to_timestamp is not None:
                first = firsts.get(p, end)  # nothing at or after the start time: an empty range
                stop = stops.get(p, end)
            else:
                first = config.from_offset if config.from_offset is not None else starts[p]
                stop = config.to_offset if config.to_offset is not None else end
            if first < starts[p]:
                logger.warning(
                    "topic %s partition %d: offsets %d-%d are gone (log start %d); replaying from %d",
                    topic,
                    p,
                    first,
                    starts[p] - 1,
                    starts[p],
                    starts[p],
                )
            first = max(first, starts[p])
            stop = min(stop, end)
            ranges[(topic, p)] = (first, max(first, stop))
    return ranges


def source_frame(spark: SparkSession, storage: Storage, ranges: Ranges) -> DataFrame:
    """The records of ``ranges`` with the Kafka source's columns."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = []
    for topic in dict.fromkeys(t for t, _ in ranges):
        terms = [
            (F.col("partition") == p) & (F.col("offset") >= lo) & (F.col("offset") < hi)
            for (t, p), (lo, hi) in sorted(ranges.items())
            if t == topic and hi > lo
        ]
        frame = spark.read.format("delta").load(spark_path(storage.topic_uri(topic)))
        frame = frame.where(reduce(lambda a, b: a | b, terms) if terms else F.lit(False))
        frames.append(frame.select(*KAFKA_COLUMNS))
    return reduce(lambda a, b: a.unionByName(b), frames)


def _already_written(storage: Storage, uri: str, app_id: str) -> bool:
    try:
        if not storage.is_table(uri):
            return False
        return (open_table(storage, uri).transaction_version(app_id) or 0) >= 1
    except (StorageError, DeltaError, OSError):
        return False


def run(spark: SparkSession, config: ReprocessConfig, progress: Progress | None = None) -> JobResult:
    """Replay the configured range through the transformation into the target, exactly once.

    Raises:
        InvalidRequest: The transformation fails or does not return a DataFrame.
    """
    from pyspark.sql import DataFrame

    started = time.monotonic()
    progress = progress or LogProgress()
    storage = config.storage()
    config.check()
    configure(spark, storage.root, storage.storage_options)  # Spark's Delta reader over s3a://
    transform = load_transform(config.transform)
    target = f"topic {config.to_topic}" if config.to_topic else f"table {config.to_table}"
    out = TopicResult(",".join(config.topics))
    result = JobResult(NAME, [out])
    progress.start(f"reprocess {out.topic} -> {target}", 3)
    if config.to_topic is not None:
        writer = f"reprocess/{config.job_id}"
        target_uri = storage.topic_uri(config.to_topic)
        done = _already_written(storage, target_uri, writer_app_id(config.to_topic, writer))
    else:
        assert config.to_table is not None
        writer = f"topiclake-reprocess-{config.job_id}"
        target_uri = config.to_table
        done = _already_written(storage, target_uri, writer)
    out.details["target"] = target
    if done:
        logger.info("job %s already wrote %s: nothing to do", config.job_id, target)
        out.skipped = f"job {config.job_id} already wrote {target}"
        result.seconds = time.monotonic() - started
        return result
    with ExitStack() as stack:
        for topic in config.topics:
            stack.enter_context(topic_lease(storage, topic, NAME))
        ranges = resolve_ranges(spark, storage, config)
        out.partitions = len(ranges)
        out.details["offsets"] = " ".join(f"{t}/{p}:{lo}-{hi}" for (t, p), (lo, hi) in sorted(ranges.items()))
        progress.advance("range fixed")
        frame = source_frame(spark, storage, ranges)
        if transform is not None:
            try:
                frame = transform(frame)
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise InvalidRequest(
                    f"--transform {config.transform} failed: {type(exc).__name__}: {first}"
                ) from exc
            if not isinstance(frame, DataFrame):
                raise InvalidRequest(
                    f"--transform {config.transform} returned {type(frame).__name__}, not a DataFrame"
                )
        tag = new_tag(NAME)
        if config.to_topic is not None:
            _, index = load_index(storage, config.to_topic)
            out.files_before, out.bytes_before = size_of(index)
            writer_frame = (
                frame.write.format("topiclake")
                .option("warehouse", storage.root)
                .option("topic", config.to_topic)
                .option("writerId", writer)
            )
            for key, value in config.storage_options.items():
                writer_frame = writer_frame.option(f"storage.{key}", value)
            writer_frame.mode("append").save()
        elif not local_warehouse_uri(target_uri):
            # Spark's Delta commit on an object store is not conditional: delta-rs's is (jobs/_commit.py)
            write_table_with_delta_rs(frame, storage, target_uri, writer, tag)
        else:
            (
                frame.write.format("delta")
                .mode("append")
                .option("txnAppId", writer)
                .option("txnVersion", 1)
                .option("userMetadata", tag)
                .save(spark_path(target_uri))
            )
        progress.advance("written")
    out.commits = 1
    out.records_written = _records_written(storage, config, target_uri, writer, tag)
    if config.to_topic is not None:
        info = topic_infos(storage, [config.to_topic])[config.to_topic]
        out.record_end(storage, config.to_topic, info.partitions)
    progress.advance("done")
    logger.info("%s", out.summary())
    result.seconds = time.monotonic() - started
    return result


def _records_written(
    storage: Storage, config: ReprocessConfig, uri: str, writer: str, tag: str
) -> int | None:
    """Records the job's commit added to the target, from that commit's metrics."""
    try:
        history = open_table(storage, uri).history(200)
    except (StorageError, DeltaError, OSError) as exc:
        logger.warning("cannot read the history of %s: %s", uri, exc)
        return None
    for commit in history:
        metrics = commit.get("operationMetrics") or {}
        if config.to_topic is not None and commit.get("topiclake.writer") == writer:
            return int(metrics.get("num_added_rows", 0))
        if config.to_table is not None and commit.get("userMetadata") == tag:
            return int(metrics.get("numOutputRows", metrics.get("num_added_rows", 0)))
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.reprocess ...`` (and ``spark-submit .../reprocess.py ...``)."""
    return run_main(NAME, argv, parser(), ReprocessConfig.from_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
