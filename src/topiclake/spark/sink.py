"""The ``topiclake`` sink: ``df.write.format("topiclake")`` and ``df.writeStream.format("topiclake")``.

Input columns are those of Spark's Kafka sink: ``value`` (required), ``key``, ``topic``, ``partition``,
``headers`` (``array<struct<key:string,value:binary>>``), plus an optional ``timestamp`` (CreateTime).
``key`` and ``value`` may be binary or string. The ``topic`` option, when set, wins over the column.

Executors only turn their rows into Arrow and send them to the driver with the task's commit message; the
driver appends each topic's records in ONE Delta commit through :class:`~topiclake.platform.log.topic_writer.
TopicWriter`, under the same partitioner, offsets and fencing as the gateway, so the two can write one
topic at the same time. Exactly once: every commit carries the writer's id and a sequence number — the
micro-batch id + 1 for a stream, ``writerVersion`` (default 1) for a batch write — and a write the table
already holds is skipped. A stream's writer id is the ``writerId`` option or, by default, derived from its
checkpoint location, so a restarted query that replays its last batch writes nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from topiclake.errors import InvalidRequest
from topiclake.platform.log.topic_writer import TopicWriter, WriteResult
from topiclake.platform.storage import Storage
from topiclake.schemas import HEADERS_TYPE

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

__all__ = ["TopiclakeStreamWriter", "TopiclakeWriter", "records_by_topic"]

_KNOWN = {"key", "value", "topic", "partition", "headers", "timestamp"}


@dataclass
class ArrowRows(WriterCommitMessage):
    """A task's rows, as an Arrow IPC stream, on their way to the driver's commit."""

    ipc: bytes
    rows: int


def _option(options: Mapping[str, str], name: str) -> str | None:
    # Spark passes option names as given (case-insensitive map on the JVM side); accept any case
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return None


def _check_schema(options: Mapping[str, str], schema: StructType) -> None:
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise InvalidRequest(
            "the topiclake sink needs a 'value' column (binary or string), as Spark's Kafka sink does; "
            f"the input has {sorted(names)}"
        )
    if _option(options, "topic") is None and "topic" not in names:
        raise InvalidRequest("set the 'topic' option or give the input a 'topic' column")
    unknown = names - _KNOWN
    if unknown:
        logger.info("topiclake sink ignores columns %s", sorted(unknown))


def _to_binary(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return pc.cast(array, pa.binary())
    if pa.types.is_large_binary(array.type):
        return pc.cast(array, pa.binary())
    return array


def _normalize(batch: pa.RecordBatch, topic_option: str | None) -> pa.Table:
    """Spark's Arrow batch -> the columns TopicWriter takes, plus ``topic``."""
    table = pa.Table.from_batches([batch])
    n = table.num_rows
    names = set(table.column_names)
    cols: dict[str, pa.Array] = {
        "key": _to_binary(table["key"]) if "key" in names else pa.nulls(n, pa.binary()),
        "value": _to_binary(table["value"]),
    }
    if topic_option is not None:
        cols["topic"] = pa.array([topic_option] * n, pa.string())
    else:
        cols["topic"] = pc.cast(table["topic"].combine_chunks(), pa.string())
    if "partition" in names:
        cols["partition"] = pc.cast(table["partition"].combine_chunks(), pa.int32())
    if "headers" in names:
        cols["headers"] = table["headers"].combine_chunks().cast(HEADERS_TYPE)
    if "timestamp" in names:
        ts = pc.cast(table["timestamp"].combine_chunks(), pa.timestamp("us", tz="UTC"))
        cols["timestamp_ms"] = pc.divide(pc.cast(ts, pa.int64()), 1000)
    return pa.table(cols)


def _serialize(batches: Iterator[pa.RecordBatch], topic_option: str | None) -> ArrowRows:
    sink = pa.BufferOutputStream()
    writer: pa.ipc.RecordBatchStreamWriter | None = None
    rows = 0
    for batch in batches:
        table = _normalize(batch, topic_option)
        if writer is None:
            writer = pa.ipc.new_stream(sink, table.schema)
        writer.write_table(table)
        rows += table.num_rows
    if writer is None:
        return ArrowRows(b"", 0)
    writer.close()
    return ArrowRows(sink.getvalue().to_pybytes(), rows)


def records_by_topic(messages: list[WriterCommitMessage | None]) -> dict[str, pa.Table]:
    """The rows of all tasks' commit messages, per topic (topic column dropped)."""
    tables = []
    for message in messages:
        if isinstance(message, ArrowRows) and message.rows:
            tables.append(pa.ipc.open_stream(message.ipc).read_all())
    if not tables:
        return {}
    table = pa.concat_tables(tables, promote_options="default")
    if table["topic"].null_count:
        raise InvalidRequest("a record has no topic: set the 'topic' option or fill the 'topic' column")
    out = {}
    for topic in pc.unique(table["topic"]).to_pylist():
        out[topic] = table.filter(pc.equal(table["topic"], topic)).drop_columns(["topic"])
    return out


class _SinkBase:
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidRequest("topics are append-only: the topiclake sink supports mode 'append' only")
        _check_schema(options, schema)
        warehouse = _option(options, "warehouse")
        if not warehouse:
            raise InvalidRequest(
                "no warehouse: set the 'warehouse' option or the Spark conf spark.topiclake.warehouse"
            )
        self.warehouse = warehouse
        self.topic = _option(options, "topic")
        self.writer_id = _option(options, "writerId")
        self.storage_options = {
            k.split(".", 1)[1]: v for k, v in options.items() if k.lower().startswith("storage.")
        }

    def _write_all(self, messages: list[WriterCommitMessage | None], sequence: int) -> list[WriteResult]:
        storage = Storage(self.warehouse, self.storage_options or None)
        results = []
        topics = records_by_topic(messages)
        if not topics and self.topic is not None and self.writer_id is not None:
            topics = {
                self.topic: pa.table({"key": pa.array([], pa.binary()), "value": pa.array([], pa.binary())})
            }
        for topic, records in sorted(topics.items()):
            results.append(TopicWriter(storage, topic).write(records, self.writer_id, sequence))
        return results


class TopiclakeWriter(_SinkBase, DataSourceArrowWriter):
    """Batch writes: ``df.write.format("topiclake").option("topic", "t").save()``.

    With a ``writerId`` option the write happens once: running it again (the same job re-run) writes
    nothing. ``writerVersion`` (default 1) numbers successive writes of one writer id.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        version = _option(options, "writerVersion") or "1"
        if not version.isdigit() or int(version) < 1:
            raise InvalidRequest(f"writerVersion must be a positive integer, not {version!r}")
        self.sequence = int(version)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ArrowRows:
        """Executor side: the task's rows as Arrow, for the driver's commit."""
        return _serialize(iterator, self.topic)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver side: append every topic's rows in one fenced Delta commit."""
        for result in self._write_all(messages, self.sequence):
            logger.info(
                "topiclake sink: topic %s %s (%d records, version %d)",
                result.topic,
                "already written" if result.skipped else "written",
                result.records,
                result.version,
            )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing was written by the tasks themselves: nothing to undo."""
        logger.warning("topiclake sink: write aborted; nothing was committed")


class TopiclakeStreamWriter(_SinkBase, DataSourceStreamArrowWriter):
    """Streaming writes, exactly once per micro-batch (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        if self.writer_id is None:
            checkpoint = _option(options, "checkpointLocation") or _option(options, "path")
            if checkpoint:
                digest = hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:16]
                self.writer_id = f"stream-{digest}"
            else:
                logger.warning(
                    "topiclake sink: no writerId and no checkpointLocation; a replayed micro-batch "
                    "would be written again (at least once)"
                )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ArrowRows:
        """Executor side: the task's rows as Arrow, for the driver's commit."""
        return _serialize(iterator, self.topic)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: append micro-batch ``batchId`` once."""
        for result in self._write_all(messages, batchId + 1):
            logger.info(
                "topiclake sink: batch %d to topic %s %s (%d records)",
                batchId,
                result.topic,
                "replayed, skipped" if result.skipped else "written",
                result.records,
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing was written by the tasks themselves: nothing to undo."""
        logger.warning("topiclake sink: batch %d aborted; nothing was committed", batchId)
