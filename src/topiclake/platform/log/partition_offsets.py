"""Both ends of every partition's log as rows of ``_system/partition_offsets``, for SQL and Spark readers.

The broker answers a partition's ends from memory and the ``txn`` high watermark; a SQL reader sees only
rows, so a partition that retention emptied has no end there. :func:`record_partition_offsets` reads the
ends of a topic's partitions from its table (log start: the smallest offset left, or the high watermark
when none is; end: the ``txn`` high watermark) and appends them. Callers are what removes records: every
Spark job records the ends after its commits (``TopicResult.record_end``). Offsets only grow, so a row is
a lower bound of the ends forever after, and together with the rows still in the table it gives the exact
ends (``topiclake.spark`` builds the ``partition_offsets`` and ``consumer_lag`` views on it).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import StorageError
from topiclake.platform.catalog import TopicInfo
from topiclake.platform.log.file_index import FileIndex, build_index
from topiclake.platform.storage import Storage
from topiclake.platform.storage.delta_state import read_txn
from topiclake.schemas.partition_offsets import (
    PARTITION_OFFSETS_SCHEMA,
    PARTITION_OFFSETS_TABLE,
    PARTITION_OFFSETS_TABLE_PROPERTIES,
)

logger = logging.getLogger(__name__)

_FOREIGN = (DeltaError, OSError, pa.ArrowException)
_ATTEMPTS = 5


#: The ``txn`` app id of a partition's high watermark (``topiclake.platform.log.topic_log.partition_app_id``,
#: passed in by callers so that this module sits below the topic log).
AppId = Callable[[str, int], str]


def partition_ends(
    storage: Storage, info: TopicInfo, app_id: AppId, table: DeltaTable | None = None
) -> dict[int, tuple[int, int]]:
    """(log start offset, end offset) of every partition of a topic, read from its table (or ``table``)."""
    uri = storage.topic_uri(info.name)
    try:
        if table is None:
            table = DeltaTable(uri, storage_options=storage.options())
        dt_ = table
        return ends_of(info, app_id, build_index(table, storage.filesystem(uri)), lambda a: read_txn(dt_, a))
    except _FOREIGN as exc:
        raise StorageError(f"cannot read the ends of topic {info.name}: {exc}", topic=info.name) from exc


def ends_of(
    info: TopicInfo, app_id: AppId, index: FileIndex, txn: Callable[[str], int | None]
) -> dict[int, tuple[int, int]]:
    """(log start offset, end offset) of every partition, from a file index and the table's ``txn`` ids
    (a delta-rs handle's, or on S3 the maintainer's table state: no request)."""
    out: dict[int, tuple[int, int]] = {}
    for p in range(info.partitions):
        hwm = txn(app_id(info.name, p))
        end = int(hwm) if hwm is not None else (index.end_offset(p) or 0)
        start = index.log_start_offset(p)
        out[p] = (end if start is None else start, end)
    return out


def record_partition_offsets(
    storage: Storage,
    info: TopicInfo,
    app_id: AppId,
    recorded_by: str = "topiclake",
    table: DeltaTable | None = None,
    ends: dict[int, tuple[int, int]] | None = None,
) -> dict[int, tuple[int, int]]:
    """Append the current ends of every partition of ``info`` to ``_system/partition_offsets``.

    Args:
        storage: The warehouse.
        info: The topic (its ``topic_id`` keys the rows).
        app_id: ``partition_app_id`` of the topic log.
        recorded_by: Who records (a job's name, a broker), for the curious.
        table: A current handle of the topic table, if the caller has one.
        ends: The ends, if the caller knows them (:func:`ends_of`): the topic table is not read.

    Returns:
        The ends recorded: partition -> (log start offset, end offset).

    Raises:
        StorageError: The topic table or the offsets table cannot be read or written.
    """
    if ends is None:
        ends = partition_ends(storage, info, app_id, table)
    n = len(ends)
    rows = pa.Table.from_arrays(
        [
            pa.array([info.name] * n, pa.string()),
            pa.array([info.topic_id] * n, pa.string()),
            pa.array(list(ends), pa.int32()),
            pa.array([s for s, _ in ends.values()], pa.int64()),
            pa.array([e for _, e in ends.values()], pa.int64()),
            pa.array([dt.datetime.now(dt.UTC)] * n, pa.timestamp("us", tz="UTC")),
            pa.array([recorded_by] * n, pa.string()),
        ],
        schema=PARTITION_OFFSETS_SCHEMA,
    )
    uri = storage.system_uri(PARTITION_OFFSETS_TABLE)
    last: Exception | None = None
    for _ in range(_ATTEMPTS):  # blind appends; a lost race to create the table just goes again
        try:
            if storage.is_table(uri):
                write_deltalake(uri, rows, mode="append", storage_options=storage.options())
            else:
                write_deltalake(
                    uri,
                    rows,
                    mode="append",
                    name="topiclake_partition_offsets",
                    configuration=PARTITION_OFFSETS_TABLE_PROPERTIES,
                    storage_options=storage.options(),
                )
            logger.info("topic %s: recorded the ends of %d partitions (%s)", info.name, n, recorded_by)
            return ends
        except _FOREIGN as exc:
            last = exc
    raise StorageError(f"cannot record partition offsets in {uri}: {last}", uri=uri) from last


def recorded_partition_offsets(storage: Storage) -> dict[tuple[str, int], tuple[int, int]]:
    """The newest recorded ends per (topic id, partition): the largest log start and end offsets."""
    uri = storage.system_uri(PARTITION_OFFSETS_TABLE)
    if not storage.is_table(uri):
        return {}
    try:
        data = DeltaTable(uri, storage_options=storage.options()).to_pyarrow_table(
            columns=["topic_id", "partition", "log_start_offset", "end_offset"]
        )
    except _FOREIGN as exc:
        raise StorageError(f"cannot read {uri}: {exc}", uri=uri) from exc
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for tid, p, start, end in zip(*(data[c].to_pylist() for c in data.column_names), strict=True):
        old = out.get((tid, p), (0, 0))
        out[(tid, p)] = (max(old[0], start), max(old[1], end))
    return out
