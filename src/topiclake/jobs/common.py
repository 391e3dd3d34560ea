"""What the Spark jobs share: arguments, results, progress, the log lease, conflict retries, ``main``.

Every job module (``compact``, ``retention``, ``compact_keys``, ``vacuum``, ``reprocess``) has one shape:

- ``parser() -> argparse.ArgumentParser``: its arguments (:func:`base_parser` adds the common ones);
- ``main(argv) -> int``: parse, build the session with ``get_spark``, ``run``, print the summary
  (:func:`run_main`);
- ``run(spark, config, progress=None) -> JobResult``: the work, callable in-process with any session.

A job never changes a topic table but in ONE Delta transaction per commit, with Delta's own conflict
checks on a local warehouse and, on an object store, as ONE put-if-absent log entry whose winners are
checked as the brokers check theirs (:mod:`topiclake.jobs._commit`); a commit that loses against a
concurrent one (the gateway's appends and compactions, another job) is planned again from a fresh
snapshot and retried (:func:`retry_conflicts`). Offsets are never written and the high-watermark ``txn``
actions are never touched. What the jobs know about topic tables (the file
index, segments, the rewrite) is in :mod:`topiclake.jobs._tables`.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from topiclake.errors import CommitConflict, InvalidRequest, PartitionNotFound, TopiclakeError, TopicNotFound
from topiclake.jobs._results import JobResult, LogProgress, Progress, TopicResult, human_bytes
from topiclake.platform.catalog import CATALOG_TABLE, TopicCatalog, TopicInfo
from topiclake.platform.storage import Storage
from topiclake.platform.storage.leases import LeaseKind, LogLease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

__all__ = [
    "CONFLICT_MARKERS",
    "DEFAULT_ATTEMPTS",
    "DEFAULT_WAREHOUSE",
    "MASTER_ENV",
    "WAREHOUSE_ENV",
    "JobConfig",
    "JobResult",
    "LogProgress",
    "Progress",
    "TopicResult",
    "add_partition_argument",
    "base_parser",
    "check_partitions",
    "configure_logging",
    "conflict_reason",
    "human_bytes",
    "non_negative_int",
    "parse_pairs",
    "positive_int",
    "retry_conflicts",
    "run_main",
    "start_spark",
    "topic_infos",
    "topic_lease",
]

T = TypeVar("T")

#: Environment variable of the default warehouse (as for ``topiclake serve``).
WAREHOUSE_ENV = "TOPICLAKE_WAREHOUSE"
DEFAULT_WAREHOUSE = "./data"
#: Environment variable of the default Spark master (as for ``get_spark``).
MASTER_ENV = "TOPICLAKE_SPARK_MASTER"

#: Substrings of the messages of Delta's ``ConcurrentModificationException`` subclasses (and their error
#: classes), as they reach Python through py4j or pyspark: a commit that lost against a concurrent one.
CONFLICT_MARKERS: tuple[str, ...] = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "ProtocolChangedException",
    "MetadataChangedException",
    "DELTA_CONCURRENT_",
    "DELTA_PROTOCOL_CHANGED",
    "DELTA_METADATA_CHANGED",
    "TopiclakeRewriteConflict",  # a job's put-if-absent commit on an object store lost (jobs/_commit.py)
)

#: How often one commit is planned and tried before the job gives up with ``CommitConflict``.
DEFAULT_ATTEMPTS = 8


# ---------------------------------------------------------------------------------------------- results


# ---------------------------------------------------------------------------------------------- progress


# ---------------------------------------------------------------------------------------------- arguments


def add_partition_argument(parser: argparse.ArgumentParser) -> None:
    """``--partition N`` (repeatable; ``partitions`` in the namespace, None meaning all)."""
    parser.add_argument(
        "--partition",
        dest="partitions",
        action="append",
        type=non_negative_int,
        metavar="N",
        help="only this partition (repeatable; default all)",
    )


def base_parser(name: str, description: str) -> argparse.ArgumentParser:
    """A parser with the arguments every job takes: warehouse, topics, master, storage options."""
    parser = argparse.ArgumentParser(prog=f"python -m topiclake.jobs.{name}", description=description)
    parser.add_argument(
        "--warehouse",
        default=os.environ.get(WAREHOUSE_ENV, DEFAULT_WAREHOUSE),
        help=f"warehouse URI (default ${WAREHOUSE_ENV} or {DEFAULT_WAREHOUSE})",
    )
    parser.add_argument(
        "--topic",
        dest="topics",
        action="append",
        required=True,
        metavar="NAME",
        help="topic to work on (repeatable)",
    )
    parser.add_argument(
        "--master",
        default=os.environ.get(MASTER_ENV),
        help=f"Spark master URL (default ${MASTER_ENV} or local[*]; ignored when a session is running)",
    )
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object-store option for the warehouse, as delta-rs takes it (repeatable)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level"
    )
    return parser


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def parse_pairs(items: Sequence[str] | None, option: str = "--storage-option") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``.

    Raises:
        InvalidRequest: An item has no ``=`` or an empty key.
    """
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"{option} expects KEY=VALUE, not {item!r}")
        out[key] = value
    return out


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The settings every job has.

    Attributes:
        warehouse: Warehouse URI.
        topics: Topics to work on, in order.
        master: Spark master URL for ``main`` (None: ``$TOPICLAKE_SPARK_MASTER`` or ``local[*]``).
        storage_options: Object-store options of the warehouse (delta-rs names).
    """

    warehouse: str = DEFAULT_WAREHOUSE
    topics: tuple[str, ...] = ()
    master: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def common(ns: argparse.Namespace) -> dict[str, Any]:
        """The common fields from parsed arguments, as keyword arguments of a config class."""
        return {
            "warehouse": ns.warehouse,
            "topics": tuple(dict.fromkeys(ns.topics)),
            "master": ns.master,
            "storage_options": parse_pairs(ns.storage_options),
        }

    def storage(self) -> Storage:
        """The warehouse as a :class:`Storage`."""
        return Storage(self.warehouse, self.storage_options)

    def check(self) -> None:
        """Fail fast, before any Spark work, on what cannot run.

        Raises:
            InvalidRequest: No topic was given.
            StorageError: The warehouse's store is unreachable, its bucket missing or access refused.
            TopicNotFound: A topic does not exist.
        """
        if not self.topics:
            raise InvalidRequest("give at least one --topic")
        storage = self.storage()
        storage.check_access()  # a wrong endpoint, bucket or key: one line, before Spark starts
        topic_infos(storage, self.topics)


def topic_infos(storage: Storage, names: Sequence[str]) -> dict[str, TopicInfo]:
    """The catalog entries of some topics.

    Raises:
        TopicNotFound: One of them does not exist (or the warehouse has no topic catalog at all).
    """
    if not storage.is_table(storage.system_uri(CATALOG_TABLE)):
        missing = names[0] if names else "?"
        raise TopicNotFound(
            f"topic {missing!r} does not exist: warehouse {storage.root} has no topics", topic=missing
        )
    catalog = TopicCatalog(storage)
    return {name: catalog.get(name) for name in names}


def check_partitions(storage: Storage, topics: Sequence[str], partitions: Sequence[int]) -> None:
    """Fail when a topic lacks one of ``partitions``.

    Raises:
        PartitionNotFound: A topic has no such partition.
    """
    for name, info in topic_infos(storage, topics).items():
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise PartitionNotFound(
                    f"topic {name} has no partition {p} (it has {info.partitions})", topic=name, partition=p
                )


# ---------------------------------------------------------------------------------------------- conflicts


def conflict_reason(exc: BaseException) -> str | None:
    """The line saying why a Delta commit lost against a concurrent one, or None for another error."""
    text = str(exc)
    if not any(marker in text for marker in CONFLICT_MARKERS):
        return None
    for line in text.splitlines():
        if any(marker in line for marker in CONFLICT_MARKERS):
            return line.strip()[:400]
    return text.strip().splitlines()[0][:400]


def retry_conflicts(
    action: Callable[[], T],
    *,
    topic: str,
    what: str,
    attempts: int = DEFAULT_ATTEMPTS,
    base_delay_s: float = 0.5,
) -> tuple[T, int]:
    """Run ``action`` (plan from a fresh snapshot + one commit) until it does not lose a conflict.

    Returns:
        What ``action`` returned, and how many times it was retried.

    Raises:
        CommitConflict: It lost ``attempts`` times in a row.
    """
    retries = 0
    while True:
        try:
            return action(), retries
        except Exception as exc:
            reason = conflict_reason(exc)
            if reason is None:
                raise
            retries += 1
            if retries >= attempts:
                raise CommitConflict(
                    f"{what} of topic {topic} lost {retries} times against concurrent commits: {reason}",
                    topic=topic,
                ) from exc
            delay = min(base_delay_s * 2 ** (retries - 1), 30.0) * (0.5 + random.random())
            logger.warning(
                "topic %s: %s lost against a concurrent commit (%s); retry %d/%d in %.1f s",
                topic,
                what,
                reason,
                retries,
                attempts - 1,
                delay,
            )
            time.sleep(delay)


# ---------------------------------------------------------------------------------------------- lease


@contextmanager
def topic_lease(storage: Storage, topic: str, job: str, kind: LeaseKind = "log") -> Iterator[LogLease]:
    """Hold the topic's Delta log whole while the job reads and commits (platform/storage/leases.py); a job
    that rewrites records takes kind ``rewrite``, which also holds the brokers' own compaction."""
    lease = LogLease(storage, topic, holder=f"topiclake-{job}-{uuid.uuid4().hex[:8]}", kind=kind)
    with lease:
        yield lease


# ---------------------------------------------------------------------------------------------- main


def configure_logging(level: str) -> None:
    """Log lines to stderr (entry points only)."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def start_spark(
    name: str, config: JobConfig, conf: Mapping[str, str] | None = None
) -> tuple[SparkSession, bool]:
    """The session of an entry point: the running one if any, else a new one from ``get_spark``.

    Returns:
        The session and whether this call created it (then the caller stops it).
    """
    from pyspark.sql import SparkSession

    from topiclake.jobs.session import get_spark

    running = SparkSession.getActiveSession()
    spark = get_spark(config.master, app_name=f"topiclake-{name}", warehouse=config.warehouse, conf=conf)
    return spark, running is None


def run_main(
    name: str,
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser,
    make_config: Callable[[argparse.Namespace], JobConfig],
    run: Callable[[SparkSession, Any, Progress | None], JobResult],
) -> int:
    """The body of every job's ``main``: parse, check, run, print the summary.

    Returns:
        0 when the job ran, 1 on a topiclake error (``ClassName: message`` on stderr). Bad arguments
        exit with argparse's usage error (2). Called without ``argv`` (a console script, ``python -m``,
        ``spark-submit``) it never returns: the process ends with that code through
        :func:`topiclake.process.run_and_exit` (delta-rs may abort Python's own teardown), except inside
        a Databricks task, whose process Databricks keeps.
    """
    from topiclake.process import owns_process, run_and_exit

    if argv is None and owns_process():
        run_and_exit(lambda: run_main(name, sys.argv[1:], parser, make_config, run))
    ns = parser.parse_args(argv)
    configure_logging(ns.log_level)
    try:
        config = make_config(ns)
        config.check()
        spark, created = start_spark(name, config)
        try:
            result = run(spark, config, None)
        finally:
            if created:
                spark.stop()
    except TopiclakeError as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc.message}\n")
        return 1
    sys.stdout.write(result.summary() + "\n")
    return 0
