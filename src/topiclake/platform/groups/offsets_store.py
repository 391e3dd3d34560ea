"""Committed offsets of consumer groups, in the Delta table ``<warehouse>/_system/consumer_offsets``.

Commits are group-committed like the topic log: :meth:`OffsetsStore.submit` queues rows, a flusher thread
waits ``linger_ms`` for more and appends them all in one Delta commit; the caller's future completes after
that commit. Reads are served from memory (the newest row per group/topic/partition), rebuilt from the
table on open.

Every write carries the Delta ``txn`` action ``topiclake/consumer_offsets`` whose version is the highest
``commit_seq`` in the table. A second writer on the same warehouse (another broker) that committed meanwhile
makes our commit fail Delta's conflict check; we then re-read the table and commit again, so no commit is
lost or applied on top of a state we have not seen.

The table stays small: once more than ``compact_after`` superseded rows pile up, the flusher rewrites it
(``overwrite``, same fence) with only the newest rows. Deleting a group rewrites it without the group's
rows. Rewrites are followed by a checkpoint, log cleanup and a vacuum of files removed over an hour ago.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from topiclake.errors import BrokerClosed, StorageError
from topiclake.platform.groups._offsets_base import (
    _FOREIGN,
    OFFSETS_APP_ID,
    CommittedOffset,
    TopicPartition,
    _Key,
    _Pending,
    wait,
)
from topiclake.platform.groups._offsets_table import OffsetsTable
from topiclake.platform.storage import Storage
from topiclake.schemas.offsets import OFFSETS_TABLE

logger = logging.getLogger(__name__)

__all__ = ["OFFSETS_APP_ID", "CommittedOffset", "OffsetsStore", "TopicPartition", "wait"]


class OffsetsStore(OffsetsTable):
    """The offsets table of one warehouse, with an in-memory copy of the newest rows.

    Args:
        storage: The warehouse; the table is created if missing.
        linger_ms: How long the flusher waits for more commits before it writes.
        compact_after: Rewrite the table once it holds this many superseded rows.
        commit_attempts: How often a write is tried against failing or conflicting commits.

    Raises:
        StorageError: The table cannot be created, opened or read.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        linger_ms: float = 5.0,
        compact_after: int = 1000,
        commit_attempts: int = 10,
    ) -> None:
        self._storage = storage
        self.uri = storage.system_uri(OFFSETS_TABLE)
        self._linger_s = linger_ms / 1000
        self._compact_after = compact_after
        self._attempts = commit_attempts
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._write_lock = threading.Lock()  # one writer at a time: the flusher, or a group deletion
        self._queue: list[_Pending] = []
        self._latest: dict[_Key, CommittedOffset] = {}
        self._seq = 0
        self._table_rows = 0
        self._closing = False
        self._last_vacuum = time.monotonic()
        self.commits = 0
        self.compactions = 0
        self._dt = self._open_or_create()
        self._load()
        self._refreshed = time.monotonic()
        self._flusher = threading.Thread(target=self._run, name="flush-consumer-offsets", daemon=True)
        self._flusher.start()

    def __repr__(self) -> str:
        return f"OffsetsStore({self.uri!r})"

    # -- reads -------------------------------------------------------------------------------------------

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of one partition, or None."""
        with self._lock:
            return self._latest.get((group, topic, partition))

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """Every committed offset of a group, by (topic, partition)."""
        with self._lock:
            return {(t, p): c for (g, t, p), c in self._latest.items() if g == group}

    def groups(self) -> set[str]:
        """The groups that have committed offsets."""
        with self._lock:
            return {g for g, _, _ in self._latest}

    def refresh(self, max_age_s: float = 0.0) -> bool:
        """See commits that another process (a Spark query's ``groupId``, another broker) made since.

        Cheap when nothing changed (one look at the Delta log: a LIST and a GET on object storage).
        ``max_age_s`` > 0 skips the look if the last one is younger than that: for periodic readers (the
        console's sampler) that can see other processes' commits late; this broker's own commits are in
        memory at once either way. Best effort: on a storage error the in-memory state stays as it was.
        Returns whether the table had moved and was re-read.
        """
        if max_age_s > 0 and time.monotonic() - self._refreshed < max_age_s:
            return False
        with self._write_lock:  # never between our own append and its in-memory update
            self._refreshed = time.monotonic()
            before = self._dt.version()
            try:
                try:
                    self._dt.update_incremental()
                except _FOREIGN:  # log entries after our version cleaned up: open the table afresh
                    self._dt = self._open_or_create()
                if self._dt.version() == before:
                    return False
                self._load()
            except (*_FOREIGN, StorageError) as exc:
                logger.warning("cannot refresh the offsets table %s: %s", self.uri, exc)
                return False
        logger.debug("offsets table %s moved on from version %d: reloaded", self.uri, before)
        return True

    def stats(self) -> dict[str, int]:
        """Rows in the table, live (newest) rows, Delta commits and compactions so far."""
        with self._lock:
            return {
                "table_rows": self._table_rows,
                "live_rows": len(self._latest),
                "commits": self.commits,
                "compactions": self.compactions,
                "version": self._dt.version(),
            }

    # -- writes ------------------------------------------------------------------------------------------

    def submit(
        self,
        group: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        member_id: str | None = None,
        generation: int = -1,
    ) -> Future[None]:
        """Queue a commit; the future completes after the Delta commit that holds it.

        The caller validates offsets and fencing; this only stores them.

        Raises:
            BrokerClosed: The store is closed.
        """
        now = time.time_ns() // 1_000_000
        rows = [
            CommittedOffset(t, p, off, meta, now, member_id, generation)
            for (t, p), (off, meta) in sorted(offsets.items())
        ]
        pending = _Pending(group, rows, Future())
        with self._cond:
            if self._closing:
                raise BrokerClosed("the offsets store is closed")
            self._queue.append(pending)
            self._cond.notify_all()
        return pending.future

    def commit(
        self,
        group: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        member_id: str | None = None,
        generation: int = -1,
        timeout_s: float = 30.0,
    ) -> None:
        """:meth:`submit` and wait for the Delta commit.

        Raises:
            RequestTimedOut: Not committed within ``timeout_s`` (it may still land).
            StorageError, CommitConflict: The write failed; nothing of this commit is stored.
        """
        future = self.submit(group, offsets, member_id=member_id, generation=generation)
        wait(future, timeout_s, group)

    def delete_group(self, group: str) -> int:
        """Remove every committed offset of a group (rewrites the table without them).

        Returns:
            How many partitions' offsets were removed.
        """
        with self._write_lock:
            with self._lock:
                gone = [k for k in self._latest if k[0] == group]
            if not gone:
                return 0
            self._rewrite(exclude_group=group)
        logger.info("deleted the committed offsets of group %s (%d partitions)", group, len(gone))
        return len(gone)

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> int:
        """Remove the committed offsets of some partitions of a group (Kafka's OffsetDelete).

        Returns:
            How many partitions had an offset that was removed.
        """
        wanted = {(group, t, p) for t, p in partitions}
        with self._write_lock:
            with self._lock:
                gone = [k for k in self._latest if k in wanted]
            if not gone:
                return 0
            self._rewrite(exclude_keys=set(gone))
        logger.info("deleted %d committed offsets of group %s", len(gone), group)
        return len(gone)

    def compact(self) -> None:
        """Rewrite the table with only the newest row per group/topic/partition."""
        with self._write_lock:
            self._rewrite()

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued and stop the flusher."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._flusher.join(timeout_s)
        logger.info("offsets store %s closed at version %d", self.uri, self._dt.version())

    # -- flusher -----------------------------------------------------------------------------------------

    # -- open and load -----------------------------------------------------------------------------------
