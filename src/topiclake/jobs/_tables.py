"""What the Spark jobs know about topic tables: paths for Spark, the file index, segments, and the one
rewrite that compaction and key compaction commit with.

Planning reads the Delta log on the driver with delta-rs (no Spark job); the commits are Spark's.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from topiclake.errors import StorageError
from topiclake.platform.log.file_index import DataFile, FileIndex, build_index
from topiclake.platform.log.topic_log import partition_app_id
from topiclake.platform.storage import Storage
from topiclake.sparkenv.s3a import spark_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)


def sql_table(uri: str) -> str:
    """``delta.`<path>``` for a table URI, quoted for Spark SQL."""
    return "delta.`" + spark_path(uri).replace("`", "``") + "`"


def open_table(storage: Storage, uri: str) -> DeltaTable:
    """A delta-rs handle of a topic table.

    Raises:
        StorageError: The table cannot be opened.
    """
    try:
        return DeltaTable(uri, storage_options=storage.options())
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot open table {uri}: {exc}", uri=uri) from exc


def load_index(storage: Storage, topic: str) -> tuple[DeltaTable, FileIndex]:
    """The topic table's latest version and its file index (delta-rs, on the driver; no Spark job)."""
    uri = storage.topic_uri(topic)
    dt = open_table(storage, uri)
    try:
        return dt, build_index(dt, storage.filesystem(uri))
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot index topic table {uri}: {exc}", topic=topic) from exc


def all_files(index: FileIndex) -> list[DataFile]:
    """Every data file of an index."""
    return [f for p in index.partitions() for f in index.files(p)]


def size_of(index: FileIndex) -> tuple[int, int]:
    """(data files, bytes) of an index."""
    files = all_files(index)
    return len(files), sum(f.size_bytes for f in files)


def log_start_offsets(dt: DeltaTable, index: FileIndex, topic: str, partitions: int) -> dict[int, int]:
    """Log start offset of every partition: its smallest offset, or its high watermark when it is empty."""
    out: dict[int, int] = {}
    for p in range(partitions):
        start = index.log_start_offset(p)
        if start is None:
            start = dt.transaction_version(partition_app_id(topic, p)) or 0
        out[p] = start
    return out


def end_state(storage: Storage, topic: str, partitions: int) -> tuple[int, int, dict[int, int]]:
    """(data files, bytes, log start offset per partition) of a topic table now, after a job's commit."""
    dt, index = load_index(storage, topic)
    files, nbytes = size_of(index)
    return files, nbytes, log_start_offsets(dt, index, topic, partitions)


def segments_of(index: FileIndex, partition: int) -> dict[int, list[DataFile]]:
    """The data files of one partition by segment, segments in ascending order."""
    by_segment: dict[int, list[DataFile]] = {}
    for f in index.files(partition):
        by_segment.setdefault(f.segment, []).append(f)
    return dict(sorted(by_segment.items()))


def segment_predicate(segments: Mapping[int, Sequence[int]]) -> str:
    """A predicate over the partition columns only: ``(partition = p AND segment IN (...)) OR ...``."""
    terms = [
        f"(partition = {int(p)} AND segment IN ({', '.join(str(int(s)) for s in sorted(segs))}))"
        for p, segs in sorted(segments.items())
        if segs
    ]
    if not terms:
        raise ValueError("no segments")
    return " OR ".join(terms)


def commit_metrics(storage: Storage, uri: str, tag: str, depth: int = 100) -> dict[str, str] | None:
    """The ``operationMetrics`` of the commit whose ``userMetadata`` is ``tag`` (None if not found)."""
    try:
        history = open_table(storage, uri).history(depth)
    except (DeltaError, OSError, StorageError) as exc:
        logger.warning("cannot read the history of %s: %s", uri, exc)
        return None
    for commit in history:
        if commit.get("userMetadata") == tag:
            metrics = commit.get("operationMetrics") or {}
            return {str(k): str(v) for k, v in metrics.items()}
    return None


def new_tag(job: str) -> str:
    """A unique ``userMetadata`` for one commit of a job, to find the commit in the history afterwards."""
    return f"topiclake:{job}:{uuid.uuid4().hex[:12]}"


def rewrite_segments(
    frame: DataFrame,
    uri: str,
    segments: Mapping[int, Sequence[int]],
    *,
    data_change: bool,
    target_file_bytes: int,
    bytes_per_record: float,
    tag: str,
) -> None:
    """Replace every record of some (partition, segment) pairs by ``frame``, in ONE Delta commit.

    The records are written sorted by offset, files of at most ``target_file_bytes`` (estimated from
    ``bytes_per_record``), one file sequence per segment. The commit is a ``replaceWhere`` overwrite whose
    predicate names partition columns only; ``frame`` must read the same table (Delta then reads it at the
    transaction's own snapshot and records what it read for the conflict check) and hold only rows of those
    segments. With ``data_change=False`` the commit is a rearrangement (compaction): Delta checks it under
    snapshot isolation, so appends to other files never fail it.
    """
    predicate = segment_predicate(segments)
    pairs = sum(len(s) for s in segments.values())
    per_file = max(1, int(target_file_bytes / max(bytes_per_record, 1.0)))
    (
        frame.repartition(max(1, min(pairs, 200)), "partition", "segment")
        .sortWithinPartitions("partition", "segment", "offset")
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .option("dataChange", "true" if data_change else "false")
        .option("maxRecordsPerFile", per_file)
        .option("userMetadata", tag)
        .save(spark_path(uri))
    )


def target_file_count(total_bytes: int, target_file_bytes: int) -> int:
    """Fewest files of at most ``target_file_bytes`` that hold ``total_bytes``."""
    return max(1, math.ceil(total_bytes / max(target_file_bytes, 1)))
