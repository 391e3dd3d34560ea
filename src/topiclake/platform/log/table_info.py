"""The Delta side of a topic, read-only: table version, data files per partition, and the jobs in its history.

For the console and operators. A topic table's ``_delta_log`` is cleaned after each checkpoint (see
:mod:`.maintenance`), so its history only reaches back over the log retention window;
a job run older than that is no longer in it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from topiclake.errors import StorageError
from topiclake.platform.log.file_index import build_index
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

JOB_KINDS = ("compaction", "key-compaction", "retention", "vacuum", "reprocess")


@dataclass(frozen=True)
class JobRun:
    """One job commit found in a topic table's history.

    ``kind`` is one of :data:`JOB_KINDS`; ``by`` says who ran it: ``broker`` (the maintenance thread),
    ``spark`` (a ``topiclake jobs`` run) or ``delta`` (any other writer, e.g. an OPTIMIZE in SQL).
    """

    kind: str
    version: int
    timestamp_ms: int
    operation: str
    by: str
    metrics: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionFiles:
    """The data files of one partition: how many, their bytes and records."""

    partition: int
    files: int
    size_bytes: int
    records: int


@dataclass(frozen=True)
class TableDescription:
    """A topic table as delta-rs reads it now."""

    topic: str
    version: int
    partitions: dict[int, PartitionFiles]
    jobs: tuple[JobRun, ...]

    @property
    def files(self) -> int:
        """Data files of the whole table."""
        return sum(p.files for p in self.partitions.values())

    @property
    def size_bytes(self) -> int:
        """Bytes of the table's data files (the log not counted)."""
        return sum(p.size_bytes for p in self.partitions.values())

    def last(self, kind: str) -> JobRun | None:
        """The newest run of a job kind in the retained history."""
        return next((j for j in self.jobs if j.kind == kind), None)


def classify(commit: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, by) of a job commit of the Delta history, or None for appends and anything else."""
    operation = str(commit.get("operation", ""))
    user = str(commit.get("userMetadata") or "")
    if commit.get("topiclake.operation") == "compaction":
        return "compaction", "broker"
    if user.startswith("topiclake:"):
        job = user.split(":")[1]
        kind = {"compact": "compaction", "compact-keys": "key-compaction"}.get(job, job)
        return (kind, "spark") if kind in JOB_KINDS else None
    if operation.startswith("VACUUM"):
        return "vacuum", "delta"
    if operation == "OPTIMIZE":
        return "compaction", "delta"
    if operation == "DELETE":
        return "retention", "delta"
    return None


def job_runs(history: list[dict[str, Any]]) -> list[JobRun]:
    """The job commits of a Delta history (newest first, as delta-rs returns it)."""
    runs = []
    for commit in history:
        found = classify(commit)
        if found is None:
            continue
        metrics = commit.get("operationMetrics") or {}
        runs.append(
            JobRun(
                kind=found[0],
                version=int(commit.get("version", -1)),
                timestamp_ms=int(commit.get("timestamp", 0)),
                operation=str(commit.get("operation", "")),
                by=found[1],
                metrics={str(k): str(v) for k, v in metrics.items()},
            )
        )
    return runs


def open_topic_table(storage: Storage, topic: str) -> DeltaTable:
    """A delta-rs handle of a topic's table.

    Raises:
        StorageError: The table cannot be opened.
    """
    uri = storage.topic_uri(topic)
    try:
        return DeltaTable(uri, storage_options=storage.options())
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot open the table of topic {topic}: {exc}", uri=uri) from exc


def update(dt: DeltaTable) -> int:
    """Bring a handle to the table's newest version and return it.

    Raises:
        StorageError: The log cannot be read.
    """
    try:
        dt.update_incremental()
        return dt.version()
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot read the log of {dt.table_uri}: {exc}") from exc


def read_history(dt: DeltaTable, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` commits up to the handle's version, newest first; a log cleaned meanwhile
    gives fewer.

    Raises:
        StorageError: The log cannot be read.
    """
    try:
        return list(dt.history(limit))
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot read the history of {dt.table_uri}: {exc}") from exc


def describe_table(storage: Storage, topic: str, history: int = 100) -> TableDescription:
    """Version, files per partition and the job runs in the last ``history`` commits (0: none read) of a
    topic table.

    Raises:
        StorageError: The table cannot be read.
    """
    dt = open_topic_table(storage, topic)
    try:
        index = build_index(dt, storage.filesystem(storage.topic_uri(topic)))
        commits = list(dt.history(history)) if history > 0 else []
    except (DeltaError, OSError) as exc:
        raise StorageError(f"cannot read the table of topic {topic}: {exc}") from exc
    parts = {
        p: PartitionFiles(
            p,
            len(files := index.files(p)),
            sum(f.size_bytes for f in files),
            sum(f.num_records for f in files),
        )
        for p in index.partitions()
    }
    return TableDescription(topic, index.version, parts, tuple(job_runs(commits)))
