"""What a Spark job reports: per-topic and per-job results (with their summaries) and progress.

Split from :mod:`topiclake.jobs.common`, which re-exports these names.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from topiclake.errors import TopiclakeError
from topiclake.platform.catalog import TopicCatalog
from topiclake.platform.storage import Storage

logger = logging.getLogger("topiclake.jobs.common")  # as before the split


@dataclass
class TopicResult:
    """What a job did to one topic.

    Attributes:
        topic: The topic.
        partitions: Partitions the job looked at.
        files_before: Data files of the topic table when the job started.
        files_after: Data files when it ended (concurrent appends count too).
        bytes_before: Bytes of those data files when the job started.
        bytes_after: Bytes when it ended.
        records_removed: Records the job deleted (retention, key compaction).
        records_written: Records the job wrote (reprocessing).
        log_start_offsets: Log start offset of every partition when the job ended.
        commits: Delta commits the job made to the topic (or the target).
        retries: Commits retried after losing against a concurrent commit.
        skipped: Why nothing was done, if so.
        details: Job-specific facts (segments deleted, files vacuumed, offset ranges, ...).
    """

    topic: str
    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0
    records_written: int | None = None
    log_start_offsets: dict[int, int] = field(default_factory=dict)
    commits: int = 0
    retries: int = 0
    skipped: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def record_end(self, storage: Storage, topic: str, partitions: int) -> None:
        """Fill in files, bytes and log start offsets of the topic table as it is now, and record both ends
        of every partition in ``_system/partition_offsets`` (what SQL's lag needs once retention emptied a
        partition; :mod:`topiclake.platform.log.partition_offsets`)."""
        from topiclake.jobs._tables import end_state
        from topiclake.platform.log.partition_offsets import record_partition_offsets
        from topiclake.platform.log.topic_log import partition_app_id

        self.files_after, self.bytes_after, self.log_start_offsets = end_state(storage, topic, partitions)
        try:
            info = TopicCatalog(storage).get(topic)
            record_partition_offsets(storage, info, partition_app_id, recorded_by="jobs")
        except TopiclakeError as exc:  # the job's own work is done and stays done
            logger.warning("topic %s: partition offsets not recorded: %s", topic, exc.message)

    def summary(self) -> str:
        """One line for this topic."""
        if self.skipped:
            return f"{self.topic}: skipped ({self.skipped})"
        parts = [f"{self.partitions} partitions"]
        if self.files_before or self.files_after:
            parts.append(f"files {self.files_before} -> {self.files_after}")
            parts.append(f"bytes {human_bytes(self.bytes_before)} -> {human_bytes(self.bytes_after)}")
        if self.records_written is not None:
            parts.append(f"records written {self.records_written}")
        else:
            parts.append(f"records removed {self.records_removed}")
        for key, value in self.details.items():
            parts.append(f"{key.replace('_', ' ')} {value}")
        if self.log_start_offsets:
            starts = " ".join(f"{p}:{o}" for p, o in sorted(self.log_start_offsets.items()))
            parts.append(f"log start {starts}")
        parts.append(f"{self.commits} commit{'s' if self.commits != 1 else ''}")
        if self.retries:
            parts.append(f"{self.retries} retried")
        return f"{self.topic}: " + ", ".join(parts)


@dataclass
class JobResult:
    """The outcome of one job run, over all its topics.

    Attributes:
        job: The job's name (``compact``, ``retention``, ...).
        topics: One result per topic, in the order given.
        seconds: Wall time of the run.
    """

    job: str
    topics: list[TopicResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def records_removed(self) -> int:
        """Records removed over all topics."""
        return sum(t.records_removed for t in self.topics)

    def summary(self) -> str:
        """The one-line summary a run ends with."""
        body = "; ".join(t.summary() for t in self.topics) or "no topics"
        return f"{self.job}: {body} ({self.seconds:.1f} s)"

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return asdict(self)


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class Progress(Protocol):
    """Where a job reports how far it got: a rich progress bar in the CLI, the log elsewhere."""

    def start(self, description: str, total: int) -> None:
        """A new task of ``total`` steps begins (one per topic, usually)."""

    def advance(self, note: str | None = None) -> None:
        """One step of the current task is done; ``note`` says which."""


class LogProgress:
    """:class:`Progress` as log lines (spark-submit shows Spark's own progress bar beside them)."""

    def __init__(self) -> None:
        self._description = ""
        self._total = 0
        self._done = 0

    def start(self, description: str, total: int) -> None:
        self._description, self._total, self._done = description, total, 0
        logger.info("%s: %d steps", description, total)

    def advance(self, note: str | None = None) -> None:
        self._done += 1
        logger.info("%s: %d/%d %s", self._description, self._done, self._total, note or "")
