"""A job's commit to a topic table on an object store: put-if-absent, as the brokers commit.

Delta Spark commits to S3 through ``S3SingleDriverLogStore``, which writes ``_delta_log/<version>.json``
without a conditional PUT: beside a broker it can overwrite the broker's commit (docs/object-storage.md).
So on an object store a job that changes a topic table does not let Spark commit:

- Spark computes the records (the scan of exactly the files planned, the key-compaction window) and its
  executors write the data files (:func:`write_rows`: ``mapInArrow``; pyarrow with the statistics
  delta-rs writes, by the brokers' own appenders: ``ObjectAppender`` on S3, ``LocalAppender`` on a
  directory);
- the driver checks that every file read is still in the table's latest snapshot and writes ONE log
  entry (:func:`commit`): the ``remove`` of every file read, the ``add`` of every file written, with
  ``If-None-Match: *`` at the version after that snapshot's (on a directory: a hard link). When a version
  is taken, the winner's entry is read: if it removed a file this job read, or
  changed the table's metadata, the job plans again from a fresh snapshot (:class:`RewriteConflict`,
  retried by :func:`~topiclake.jobs.common.retry_conflicts`); appends (the brokers' commits and their
  ``txn`` high watermarks) are no conflict, and the next version is tried. A job writes no ``txn``.

A store where this cannot be done safely is refused (:func:`table_target`): S3 without static keys to
sign the conditional PUT, a store that ignores ``If-None-Match`` (the probe), Azure and GCS (not yet).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa

from topiclake.errors import StorageError
from topiclake.jobs._tables import load_index
from topiclake.platform.log.fast_append import ENGINE, LocalAppender, LostRace
from topiclake.platform.log.file_index import DataFile
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.storage import Storage
from topiclake.platform.storage.s3_client import S3Client, S3Location, s3_location
from topiclake.schemas import TOPIC_SCHEMA
from topiclake.sparkenv.s3a import configure, spark_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The marker of a lost rewrite in :data:`~topiclake.jobs.common.CONFLICT_MARKERS`.
CONFLICT_MARKER = "TopiclakeRewriteConflict"
#: Versions taken by appends in a row before the job gives up (a broker commits up to hundreds a second).
MAX_RACES = 2000


class RewriteConflict(Exception):
    """Another writer removed a file this job read (or changed the table): plan again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{CONFLICT_MARKER}: {reason}")


@dataclass(frozen=True)
class TableTarget:
    """Where a job writes one topic table's files and log entries (picklable: executors get it).

    Attributes:
        uri: The table's URI.
        table_key: The table's key below the warehouse root (``topics/<name>``).
        location: The warehouse's S3 location, None on a local directory.
    """

    uri: str
    table_key: str
    location: S3Location | None

    def appender(self, version: int) -> LocalAppender | ObjectAppender:
        """An appender at ``version`` (the version the job planned on)."""
        if self.location is None:
            return LocalAppender(self.uri, version)
        # fresh_s 0: before the commit, one GET of _last_checkpoint says whether cleanup may have run
        return ObjectAppender(S3Client(self.location), self.table_key, version, 0.0)


def uses_put_if_absent(storage: Storage) -> bool:
    """Whether the jobs commit through :func:`commit` (object stores) rather than Delta Spark's own
    commit (a local directory, where Spark's log store already writes each version only if absent)."""
    return not storage.is_local


def table_target(storage: Storage, topic: str) -> TableTarget:
    """The target of a job's commit to ``topic``.

    Raises:
        StorageError: The store cannot take a put-if-absent commit from a job: not S3 (Azure, GCS), no
            static keys to sign it with, or a store that ignores ``If-None-Match``.
    """
    uri = storage.topic_uri(topic)
    if storage.is_local:
        return TableTarget(uri, f"topics/{topic}", None)
    location = s3_location(storage.root, storage.storage_options)
    if location is None:
        raise StorageError(
            f"a job cannot commit to {uri} safely: jobs commit with a signed conditional PUT, which needs an "
            "s3:// warehouse and static keys (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY); Delta Spark's own "
            "commit would not be conditional",
            uri=uri,
        )
    if not storage.verify_commit_safety():
        raise StorageError(
            f"a job cannot commit to {uri} safely: the store ignores If-None-Match (jobs are refused even "
            "with AWS_S3_ALLOW_UNSAFE_RENAME)",
            uri=uri,
        )
    return TableTarget(uri, f"topics/{topic}", location)


def read_files(spark: SparkSession, storage: Storage, uri: str, files: Sequence[DataFile]) -> DataFrame:
    """Spark's scan of exactly ``files`` of a topic table (Spark's Delta reader, over ``s3a://``): not a
    file a concurrent append added meanwhile, whose records this job would otherwise write twice."""
    from pyspark.sql import functions as F

    configure(spark, storage.root, storage.storage_options)
    base = spark_path(uri).rstrip("/")
    paths = [f"{base}/{f.path}" for f in files]
    frame = spark.read.format("delta").load(spark_path(uri))
    return frame.where(F.col("_metadata.file_path").isin(paths))


def write_rows(
    frame: DataFrame, target: TableTarget, *, data_change: bool, records_per_file: int, segments: int
) -> list[dict[str, dict[str, object]]]:
    """Write ``frame`` (topic rows) as data files of ``target`` on Spark's executors, sorted by offset,
    at most ``records_per_file`` records a file, and return their ``add`` actions (nothing references the
    files until :func:`commit`)."""
    per_file = max(1, records_per_file)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from write_batches(target, batches, per_file=per_file, data_change=data_change)

    # one task per core at most: a task writes all its segments' files with one store client, and
    # every task costs a Python worker round (measured: ~20 s a task on the shared 2-core machine)
    tasks = max(1, min(segments, frame.sparkSession.sparkContext.defaultParallelism, 200))
    rows = frame.repartition(tasks, "partition", "segment").mapInArrow(write, "add STRING").collect()
    return [orjson.loads(row[0]) for row in rows]


def write_batches(
    target: TableTarget, batches: Iterator[pa.RecordBatch], *, per_file: int, data_change: bool
) -> Iterator[pa.RecordBatch]:
    """On an executor: the rows of ``batches`` as Parquet files (one or more per partition and segment),
    one ``add`` action (JSON) per file."""
    collected = list(batches)
    if not collected or not sum(b.num_rows for b in collected):
        return
    table = pa.Table.from_batches(collected).select(TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)
    table = table.sort_by([("partition", "ascending"), ("segment", "ascending"), ("offset", "ascending")])
    appender = target.appender(0)
    try:
        adds: list[str] = []
        for rows in _runs(table, per_file):
            adds += [orjson.dumps(a).decode() for a in appender.write_files(rows, data_change=data_change)]
    finally:
        if isinstance(appender, ObjectAppender):
            appender.close()
    yield pa.RecordBatch.from_pydict({"add": adds}, schema=pa.schema([pa.field("add", pa.string())]))


def _runs(table: pa.Table, per_file: int) -> Iterator[pa.Table]:
    """Slices of a table sorted by (partition, segment, offset): one (partition, segment) each, at most
    ``per_file`` rows."""
    parts = table["partition"].to_pylist()
    segs = table["segment"].to_pylist()
    start = 0
    for i in range(1, len(parts) + 1):
        if i == len(parts) or (parts[i], segs[i]) != (parts[start], segs[start]) or i - start >= per_file:
            yield table.slice(start, i - start)
            start = i


def commit(
    storage: Storage,
    topic: str,
    version: int,
    read: Sequence[DataFile],
    adds: Sequence[Mapping[str, Mapping[str, object]]],
    *,
    operation: str,
    data_change: bool,
    metrics: Mapping[str, int],
    tag: str,
) -> int:
    """ONE log entry removing ``read`` (planned on table ``version``) and adding ``adds``, put-if-absent;
    returns its version.

    First the table's latest snapshot (delta-rs): every file of ``read`` must still be in it, else the job
    plans again. The entry then goes at the version after that snapshot's (:func:`put_entry`): a job
    runs for many seconds, in which brokers commit, checkpoint and may clean up the log entries after
    ``version``, so what happened since is read from the snapshot, not from entries that may be gone.

    Raises:
        RewriteConflict: A file of ``read`` was removed since ``version``; or as :func:`put_entry`.
        StorageError: The store cannot take such a commit (:func:`table_target`).
    """
    target = table_target(storage, topic)
    _, latest = load_index(storage, topic)
    live = {f.path for p in latest.partitions() for f in latest.files(p)}
    gone = {f.path for f in read} - live
    if gone:
        raise RewriteConflict(
            f"{len(gone)} file(s) read at version {version} of {target.uri} were removed by version "
            f"{latest.version}"
        )
    commit_id = uuid.uuid4().hex
    info: dict[str, object] = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": {"readVersion": str(version)},
            "readVersion": version,
            "isBlindAppend": False,
            "operationMetrics": {k: str(v) for k, v in metrics.items()},
            "userMetadata": tag,
            "engineInfo": ENGINE,
            "clientVersion": ENGINE,
            "topiclake.commit": commit_id,
        }
    }
    now = int(time.time() * 1000)
    removes = [_remove(f, now, data_change) for f in read]
    return put_entry(target, latest.version, {f.path for f in read}, [info, *removes, *adds], commit_id)


def put_entry(
    target: TableTarget,
    version: int,
    read: set[str],
    actions: Sequence[Mapping[str, object]],
    commit_id: str,
) -> int:
    """Write ``actions`` as the log entry of the first free version after ``version`` (a conditional PUT
    on S3, a hard link on a directory), past versions that appends took; returns the version.

    Raises:
        RewriteConflict: A winner removed a file of ``read`` (paths) or changed the table; or appends
            took :data:`MAX_RACES` versions in a row.
    """
    appender = target.appender(version)
    try:
        for _ in range(MAX_RACES):
            try:
                if isinstance(appender, ObjectAppender):
                    return appender.commit(actions, commit_id)
                return appender.commit(actions)
            except LostRace as race:
                winners = race.winners
                if winners.changed_table:
                    raise RewriteConflict(
                        f"version {winners.versions} of {target.uri} changed the table"
                    ) from None
                taken = winners.removed & read
                if taken:
                    raise RewriteConflict(
                        f"version {winners.versions} of {target.uri} removed {len(taken)} file(s) it read"
                    ) from None
        raise RewriteConflict(f"other writers took {MAX_RACES} versions of {target.uri} in a row")
    finally:
        if isinstance(appender, ObjectAppender):
            appender.close()


def _remove(f: DataFile, now: int, data_change: bool) -> dict[str, object]:
    return {
        "remove": {
            "path": f.path,
            "deletionTimestamp": now,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": {"partition": str(f.partition), "segment": str(f.segment)},
            "size": f.size_bytes,
        }
    }


def added_records(adds: Sequence[Mapping[str, Mapping[str, object]]]) -> int:
    """Records in the files of ``add`` actions (their ``numRecords`` statistics)."""
    return sum(int(orjson.loads(str(a["add"]["stats"]))["numRecords"]) for a in adds)


def rewrite(
    frame: DataFrame,
    storage: Storage,
    topic: str,
    version: int,
    files: Sequence[DataFile],
    *,
    data_change: bool,
    records_per_file: int,
    segments: int,
    operation: str,
    tag: str,
    expect_records: int | None = None,
) -> int:
    """Replace ``files`` (of table ``version``) by the rows of ``frame`` (computed from exactly those
    files, :func:`read_files`) in one put-if-absent commit; returns the records written.

    Raises:
        RewriteConflict: As :func:`commit`; or ``expect_records`` were to be written and the scan found
            another number (a file read was removed meanwhile: plan again).
        StorageError: The store cannot take such a commit (:func:`table_target`).
    """
    target = table_target(storage, topic)
    adds = write_rows(
        frame, target, data_change=data_change, records_per_file=records_per_file, segments=segments
    )
    written = added_records(adds)
    if expect_records is not None and written != expect_records:  # never commit a rewrite that lost rows
        raise RewriteConflict(f"{expect_records} records planned, {written} read")
    metrics = {
        "numRemovedFiles": len(files),
        "numAddedFiles": len(adds),
        "numRemovedBytes": sum(f.size_bytes for f in files),
        "numAddedBytes": sum(int(str(a["add"]["size"])) for a in adds),
        "numDeletedRows": sum(f.num_records for f in files),
        "numOutputRows": written,
    }
    commit(
        storage,
        topic,
        version,
        files,
        adds,
        operation=operation,
        data_change=data_change,
        metrics=metrics,
        tag=tag,
    )
    return written


def local_warehouse_uri(uri: str) -> bool:
    """Whether a table URI is a local path (no scheme, or ``file:``)."""
    return "://" not in uri or uri.startswith("file:")


def write_table_with_delta_rs(frame: DataFrame, storage: Storage, uri: str, writer: str, tag: str) -> None:
    """Append ``frame`` to the Delta table ``uri`` on an object store through delta-rs, in one
    put-if-absent commit carrying the job's idempotent-write transaction (``writer``, version 1). The
    records pass through the driver's memory (Arrow)."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    target = uri.replace("s3a://", "s3://", 1)
    write_deltalake(
        target,
        frame.toArrow(),
        mode="append",
        storage_options=storage.options(),
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": tag},
            app_transactions=[Transaction(app_id=writer, version=1)],
        ),
    )
