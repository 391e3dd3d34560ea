"""Offset ranges of topic partitions: the driver's view of the tables (the tasks that read them are in
:mod:`topiclake.spark._tasks`).

- :class:`Warehouse` (driver): the topic catalog and one refreshed handle per topic table, giving
  :class:`TopicSnapshot` s: per partition the high watermark (the ``txn`` version
  ``topiclake/hwm/<topic>/<p>``, committed with the records: nothing beyond it is ever read), the log start
  (smallest offset still in the table) and the data files with their offset ranges
  (:mod:`topiclake.platform.log.file_index`).

Data loss: retention deletes whole sealed segments, oldest first, so the base offset of a partition's
oldest remaining segment is where retention has cut the log. Unread offsets below it are lost
(``failOnDataLoss``); offsets missing above it are gaps left by key compaction and are simply not there.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from topiclake.errors import DataLoss, StorageError, TopiclakeError
from topiclake.platform.catalog import CATALOG_TABLE, TopicCatalog, TopicInfo
from topiclake.platform.log.file_index import DataFile, FileIndex, build_index, read_file
from topiclake.platform.log.topic_log import partition_app_id
from topiclake.platform.storage import Storage
from topiclake.schemas import KAFKA_COLUMNS, TOPIC_SCHEMA
from topiclake.spark._options import ReaderOptions

logger = logging.getLogger(__name__)

#: Rows per Arrow batch handed to Spark (Spark's own ``arrow.maxRecordsPerBatch`` default).
BATCH_ROWS = 10_000
#: Tries of a table read that races the broker's log cleanup or a vacuum.
ATTEMPTS = 3


def output_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the rows the source returns: Spark's Kafka source columns."""
    names = KAFKA_COLUMNS if include_headers else KAFKA_COLUMNS[:-1]
    return pa.schema([TOPIC_SCHEMA.field(n) for n in names])


@contextlib.contextmanager
def _translated(what: str, uri: str) -> Iterator[None]:
    """Turn a foreign error (delta-rs, pyarrow, OS) into a :class:`StorageError`, at this one seam."""
    try:
        yield
    except TopiclakeError:
        raise
    except Exception as exc:  # delta-rs and pyarrow raise their own classes; this is where they stop
        raise StorageError(f"{what} {uri}: {exc}", uri=uri) from exc


# ---------------------------------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class TopicSnapshot:
    """One topic table version as the source sees it: ends and files per partition.

    Attributes:
        topic: Topic name.
        version: Delta version (-1: the table does not exist yet).
        partitions: Partition count in the catalog.
        deleting: Whether retention may delete records (``cleanup.policy`` holds ``delete``).
        ends: High watermark per partition (the next offset to be written).
        index: The data files per partition.
    """

    topic: str
    version: int
    partitions: int
    deleting: bool
    ends: Mapping[int, int]
    index: FileIndex

    def end(self, partition: int) -> int:
        """High watermark (committed end) of a partition."""
        return self.ends.get(partition, 0)

    def log_start(self, partition: int) -> int:
        """Smallest offset still in the table (the end when the partition is empty)."""
        start = self.index.log_start_offset(partition)
        return min(start, self.end(partition)) if start is not None else self.end(partition)

    def retention_start(self, partition: int) -> int:
        """Offsets below this that are gone were deleted by retention (see the module docstring)."""
        return retention_start(self.index, partition, self.end(partition), self.deleting)

    def files(self, partition: int, start: int, end: int) -> list[DataFile]:
        """Files of a partition that can hold offsets in ``[start, end)``, by first offset."""
        return [f for f in self.index.files_from(partition, start) if f.min_offset < end]


def retention_start(index: FileIndex, partition: int, end: int, deleting: bool) -> int:
    """Base offset of the oldest remaining segment (``end`` when none remains); 0 for compact-only topics."""
    if not deleting:
        return 0
    files = index.files(partition)
    return min(f.segment for f in files) if files else end


def open_table(storage: Storage, uri: str) -> DeltaTable | None:
    """The newest version of a table, or None if it does not exist; retried when log cleanup races us."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with _translated("cannot open topic table", uri):
                if not storage.is_table(uri):
                    return None
                return DeltaTable(uri, storage_options=storage.options())
        except StorageError as exc:
            # a checkpoint or log entry cleaned up while the table was being opened: open it again
            if attempt == ATTEMPTS or "not found" not in str(exc).lower():
                raise
    raise AssertionError("unreachable")


def table_index(storage: Storage, uri: str, dt: DeltaTable) -> FileIndex:
    with _translated("cannot list the files of", uri):
        return build_index(dt, storage.filesystem(uri))


class Warehouse:
    """The driver's view of a warehouse: the topic catalog and one refreshed handle per topic table.

    Cheap to ask again: a table whose Delta version did not move keeps its snapshot.

    Args:
        options: The source's options (warehouse URI and storage options).

    Raises:
        StorageError: No topiclake warehouse there, or it cannot be read.
    """

    def __init__(self, options: ReaderOptions) -> None:
        self.storage = options.storage()
        catalog_uri = self.storage.system_uri(CATALOG_TABLE)
        if not self.storage.is_table(catalog_uri):
            raise StorageError(
                f"no topiclake warehouse at {self.storage.root} (no topic catalog {catalog_uri}); check the "
                "'warehouse' option or spark.topiclake.warehouse",
                uri=self.storage.root,
            )
        self.catalog = TopicCatalog(self.storage)
        self._catalog_read_at = time.monotonic()
        self._tables: dict[str, DeltaTable] = {}
        self._snapshots: dict[str, TopicSnapshot] = {}

    def refresh_catalog(self, max_age_s: float = 0.0) -> None:
        """See topics created, grown or deleted since the last look (unless it is under ``max_age_s`` old).

        An idle stream asks for its latest offsets every few milliseconds; the catalog changes rarely.
        """
        now = time.monotonic()
        if now - self._catalog_read_at < max_age_s:
            return
        try:
            self.catalog.refresh()
        except StorageError as exc:  # its log moved on under an old handle: read it afresh
            logger.info("topic catalog refresh failed (%s); reopening it", exc)
            self.catalog = TopicCatalog(self.storage)
        self._catalog_read_at = now

    def topics(self, names: Sequence[str] | None = None) -> dict[str, TopicInfo]:
        """Existing topics by name (all, or those of ``names`` that exist)."""
        existing = {t.name: t for t in self.catalog.list()}
        return existing if names is None else {n: existing[n] for n in names if n in existing}

    def snapshot(self, info: TopicInfo) -> TopicSnapshot:
        """The newest version of a topic's table.

        A broker deletes old Delta log entries within seconds, and delta-rs reads some of them lazily: a
        handle whose entries vanished under it is dropped and the table opened afresh.
        """
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._snapshot(info)
            except StorageError as exc:
                self._tables.pop(info.name, None)
                if attempt == ATTEMPTS:
                    raise
                logger.info("topic %s: reading the table failed (%s); opening it again", info.name, exc)
        raise AssertionError("unreachable")

    def _snapshot(self, info: TopicInfo) -> TopicSnapshot:
        uri = self.storage.topic_uri(info.name)
        dt = self._tables.get(info.name)
        if dt is not None:
            with _translated("cannot refresh topic table", uri):
                dt.update_incremental()
        else:
            dt = open_table(self.storage, uri)
            if dt is None:
                empty = TopicSnapshot(
                    info.name, -1, info.partitions, info.config.is_deleting, {}, FileIndex(-1, [])
                )
                return empty
            self._tables[info.name] = dt
        cached = self._snapshots.get(info.name)
        version = dt.version()
        if cached is not None and cached.version == version and cached.partitions == info.partitions:
            return cached
        with _translated("cannot read the high watermarks of", uri):
            txn = {p: dt.transaction_version(partition_app_id(info.name, p)) for p in range(info.partitions)}
        index = table_index(self.storage, uri, dt)
        ends = {}
        for p, v in txn.items():
            # a partition written without the platform's txn (not by topiclake) ends where its files end
            ends[p] = int(v) if v is not None else (index.end_offset(p) or 0)
        snap = TopicSnapshot(info.name, version, info.partitions, info.config.is_deleting, ends, index)
        self._snapshots[info.name] = snap
        return snap

    def close(self) -> None:
        """Drop the table handles."""
        self._tables.clear()
        self._snapshots.clear()


def offset_for_timestamp(
    storage: Storage, snap: TopicSnapshot, partition: int, timestamp_ms: int
) -> int | None:
    """The earliest offset of a partition whose timestamp is >= ``timestamp_ms`` (None: there is none)."""
    target_us = timestamp_ms * 1000
    uri = storage.topic_uri(snap.topic)
    fs = storage.filesystem(uri)
    end = snap.end(partition)
    best: int | None = None
    for f in snap.index.files(partition):
        if best is not None and f.min_offset >= best:
            break
        if f.max_timestamp_us is not None and f.max_timestamp_us < target_us:
            continue
        with _translated("cannot read", f"{uri}/{f.path}"):
            table = read_file(fs, f)
        ts = pc.cast(table["timestamp"], pa.int64())
        hit = table.filter(pc.and_(pc.greater_equal(ts, target_us), pc.less(table["offset"], end)))
        if hit.num_rows:
            found = int(pc.min(hit["offset"]).as_py())
            best = found if best is None else min(best, found)
    return best


# ---------------------------------------------------------------------------------------------- data loss


def report_data_loss(
    fail: bool, topic: str, partition: int, lost_from: int, lost_to: int, why: str, then: str | None = None
) -> None:
    """Fail with :class:`DataLoss` or log a warning (``failOnDataLoss=false``).

    Args:
        fail: ``failOnDataLoss``.
        topic: Topic.
        partition: Partition.
        lost_from: First offset lost.
        lost_to: Where reading goes on.
        why: What happened to the records (``deleted by retention``).
        then: What the query does without failing (default: continue from ``lost_to``).
    """
    where = f"at offsets [{lost_from}, {lost_to})" if lost_to > lost_from else f"from offset {lost_from} on"
    message = (
        f"records of {topic}-{partition} {where} were {why} before this query read them; some data may have "
        "been lost"
    )
    if fail:
        raise DataLoss(
            message + ". If you don't want your query to fail in such cases, set the source option "
            "failOnDataLoss to false.",
            topic=topic,
            partition=partition,
            offset=lost_from,
            log_start_offset=lost_to,
        )
    logger.warning("%s; %s (failOnDataLoss=false)", message, then or f"continuing from offset {lost_to}")


def check_start(fail: bool, snap: TopicSnapshot, partition: int, start: int, end: int) -> int:
    """Report unread records below the retention cut and return where reading can start."""
    cut = snap.retention_start(partition)
    if start < cut and start < end:
        report_data_loss(fail, snap.topic, partition, start, cut, "deleted by retention")
        return min(cut, end)
    return start
