"""The tasks of the ``topiclake`` source: :class:`TopicRange` (offsets ``[start, end)`` of one partition
and the files that can hold them, picklable and self-contained), :func:`plan_ranges` (the driver cuts a
batch into them) and :func:`read_range` (an executor reads one, sorted by offset; a file compacted away and
vacuumed since planning makes the task list the files again from the newest table version).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from topiclake.errors import StorageError, TopiclakeError
from topiclake.platform.log.file_index import DataFile, FileIndex, read_files
from topiclake.platform.storage import Storage
from topiclake.spark._options import ReaderOptions, TopicPartition
from topiclake.spark._ranges import (
    ATTEMPTS,
    BATCH_ROWS,
    TopicSnapshot,
    open_table,
    output_schema,
    report_data_loss,
    retention_start,
    table_index,
)

logger = logging.getLogger(__name__)


class TopicRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one topic partition, with the files that hold them.

    Picklable and self-contained: an executor needs nothing else (no driver state, no Spark conf).
    """

    def __init__(
        self,
        *,
        warehouse: str,
        storage_options: Mapping[str, str],
        topic: str,
        partition: int,
        start: int,
        end: int,
        files: Sequence[DataFile],
        deleting: bool,
        fail_on_data_loss: bool,
        include_headers: bool,
    ) -> None:
        super().__init__(f"{topic}-{partition}[{start},{end})")
        self.warehouse = warehouse
        self.storage_options = dict(storage_options)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.files = tuple(files)
        self.deleting = deleting
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers


def _newest_index(storage: Storage, uri: str) -> FileIndex | None:
    """The file index of a table's newest version (None: no table), retried against log cleanup."""
    for attempt in range(1, ATTEMPTS + 1):
        dt = open_table(storage, uri)
        if dt is None:
            return None
        try:
            return table_index(storage, uri, dt)
        except StorageError:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _relist(storage: Storage, part: TopicRange) -> tuple[list[DataFile], int]:
    """The files of ``part`` in the newest table version, after a data-loss check against it."""
    uri = storage.topic_uri(part.topic)
    index = _newest_index(storage, uri)
    if index is None:  # a deleted topic is the driver's to report; here it means a warehouse we cannot see
        raise StorageError(
            f"{part.value}: no topic table at {uri} on this executor; is the warehouse reachable (the same "
            "path or URI) from every executor?",
            uri=uri,
        )
    start = part.start
    cut = retention_start(index, part.partition, part.end, part.deleting)
    if start < cut:
        report_data_loss(
            part.fail_on_data_loss,
            part.topic,
            part.partition,
            start,
            min(cut, part.end),
            "deleted by retention",
        )
        start = min(cut, part.end)
    files = [f for f in index.files_from(part.partition, start) if f.min_offset < part.end]
    return files, start


def read_range(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Read one :class:`TopicRange` on an executor: Arrow batches with Kafka's columns, by offset."""
    if not isinstance(part, TopicRange):  # Spark's placeholder for a batch read without partitions
        return
    storage = Storage(part.warehouse, part.storage_options)
    uri = storage.topic_uri(part.topic)
    fs = storage.filesystem(uri)
    files, start = list(part.files), part.start
    table: pa.Table | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            table = read_files(fs, files, start)
            break
        except OSError as exc:  # compacted away and vacuumed (or deleted) since the driver listed it
            if attempt == ATTEMPTS:
                raise StorageError(f"cannot read {part.value} from {uri}: {exc}", uri=uri) from exc
            logger.info("%s: %s; listing the files again", part.value, exc)
            files, start = _relist(storage, part)
        except TopiclakeError:
            raise
        except Exception as exc:
            raise StorageError(f"cannot read {part.value} from {uri}: {exc}", uri=uri) from exc
    assert table is not None
    table = table.filter(pc.less(table["offset"], part.end))
    schema = output_schema(part.include_headers)
    table = table.select(schema.names).cast(schema)
    logger.debug("%s: %d records from %d files", part.value, table.num_rows, len(files))
    yield from table.to_batches(max_chunksize=BATCH_ROWS)


def plan_ranges(
    options: ReaderOptions,
    snapshots: Mapping[str, TopicSnapshot],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> list[TopicRange]:
    """Split ``[start, end)`` of every partition into tasks of at most ``maxRecordsPerPartition`` offsets.

    With ``minPartitions``, ranges are split further so the batch has at least that many tasks.
    """
    spans = {tp: (starts[tp], e) for tp, e in ends.items() if e > starts[tp]}
    size = options.max_records_per_partition
    if options.min_partitions is not None and spans:
        total = sum(e - s for s, e in spans.values())
        size = max(1, min(size, math.ceil(total / options.min_partitions)))
    out = []
    for (topic, p), (s, e) in sorted(spans.items()):
        snap = snapshots[topic]
        for lo in range(s, e, size):
            hi = min(lo + size, e)
            files = snap.files(p, lo, hi)
            if not files:
                continue  # a gap (key compaction) or nothing left: no task
            out.append(
                TopicRange(
                    warehouse=options.warehouse,
                    storage_options=options.storage_options,
                    topic=topic,
                    partition=p,
                    start=lo,
                    end=hi,
                    files=files,
                    deleting=snap.deleting,
                    fail_on_data_loss=options.fail_on_data_loss,
                    include_headers=options.include_headers,
                )
            )
    return out
