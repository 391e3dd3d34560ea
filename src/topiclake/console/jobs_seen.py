"""Job runs seen in the topic tables' Delta history while this broker runs.

A topic's ``_delta_log`` keeps commits only for the log retention window (seconds by default), so a page
that reads the history when it is opened would rarely see last night's compaction. The sampler reads
each table's new commits every round and remembers the newest run of each job kind here, in memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from deltalake import DeltaTable

from topiclake.errors import StorageError
from topiclake.platform import Storage
from topiclake.platform.log.table_info import JobRun, job_runs, open_topic_table, read_history, update

logger = logging.getLogger(__name__)


class JobsSeen:
    """The newest run of each job kind per topic, as seen by scanning new Delta commits.

    Args:
        storage: The warehouse.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._tables: dict[str, DeltaTable] = {}
        self._seen_version: dict[str, int] = {}
        self._latest: dict[str, dict[str, JobRun]] = {}
        self._lock = threading.Lock()

    def scan(self, topics: Iterable[str]) -> None:
        """Read the commits of each topic made since the last scan (at most 100 per topic; none when its
        version did not move)."""
        for topic in topics:
            try:
                self._scan(topic)
            except StorageError as exc:
                self._tables.pop(topic, None)
                logger.debug("console: cannot scan the history of %s: %s", topic, exc)

    def _scan(self, topic: str) -> None:
        dt = self._tables.get(topic)
        if dt is None:
            dt = self._tables[topic] = open_topic_table(self._storage, topic)
        seen = self._seen_version.get(topic, -1)
        version = update(dt)
        if version < seen:  # the topic was deleted and made again
            seen = -1
        if version == seen:
            return  # nothing new: no log file read
        history = read_history(dt, min(version - seen, 100))
        self.remember(topic, job_runs([c for c in history if int(c.get("version", -1)) > seen]))
        self._seen_version[topic] = version

    def remember(self, topic: str, runs: Iterable[JobRun]) -> None:
        """Keep the newest run of each kind among ``runs`` and those already known."""
        with self._lock:
            latest = self._latest.setdefault(topic, {})
            for run in runs:
                known = latest.get(run.kind)
                if known is None or run.version > known.version:
                    latest[run.kind] = run

    def latest(self, topic: str) -> dict[str, JobRun]:
        """The newest run of each kind known for a topic."""
        with self._lock:
            return dict(self._latest.get(topic, {}))
