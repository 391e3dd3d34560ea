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
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from topiclake.errors import BrokerClosed, CommitConflict, RequestTimedOut, StorageError, TopiclakeError
from topiclake.platform.storage import Storage
from topiclake.schemas.offsets import OFFSETS_SCHEMA, OFFSETS_TABLE, OFFSETS_TABLE_PROPERTIES

logger = logging.getLogger(__name__)

__all__ = ["OFFSETS_APP_ID", "CommittedOffset", "OffsetsStore"]

#: App id of the ``txn`` action that fences writers of the offsets table.
OFFSETS_APP_ID: Final = "topiclake/consumer_offsets"

_FOREIGN = (DeltaError, OSError, pa.ArrowException)
_VACUUM_EVERY_S: Final = 600.0

TopicPartition = tuple[str, int]
_Key = tuple[str, str, int]


@dataclass(frozen=True)
class CommittedOffset:
    """The committed offset of one partition for one group.

    Attributes:
        topic: Topic.
        partition: Partition.
        offset: The next offset the group reads (Kafka's meaning).
        metadata: The string committed with it.
        commit_timestamp_ms: When it was committed (epoch ms).
        member_id: The member that committed it (None for simple commits and resets).
        generation: That member's generation (-1 for simple commits and resets).
    """

    topic: str
    partition: int
    offset: int
    metadata: str
    commit_timestamp_ms: int
    member_id: str | None
    generation: int


@dataclass(eq=False)
class _Pending:
    group: str
    rows: list[CommittedOffset]
    future: Future[None]


class OffsetsStore:
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

    def refresh(self) -> bool:
        """See commits that another process (a Spark query's ``groupId``, another broker) made since.

        Cheap when nothing changed (one look at the Delta log). Best effort: on a storage error the
        in-memory state stays as it was. Returns whether the table had moved and was re-read.
        """
        with self._write_lock:  # never between our own append and its in-memory update
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

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                deadline = time.monotonic() + self._linger_s
                while not self._closing:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                take = self._queue
                self._queue = []
            try:
                with self._write_lock:
                    self._append(take)
                    if self._table_rows - len(self._latest) >= self._compact_after:
                        self._rewrite()
            except Exception as exc:  # every waiter must hear about it
                error = exc if isinstance(exc, TopiclakeError) else StorageError(f"offsets commit: {exc}")
                logger.warning("offsets commit of %d requests failed: %s", len(take), error)
                for pending in take:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                continue
            for pending in take:
                if not pending.future.done():
                    pending.future.set_result(None)

    def _append(self, take: list[_Pending]) -> None:
        """Append the rows of ``take`` in one fenced Delta commit; then show them in memory."""
        for attempt in range(1, self._attempts + 1):
            seq = self._seq
            records: list[dict[str, Any]] = []
            keyed: list[tuple[_Key, CommittedOffset]] = []
            for pending in take:
                for row in pending.rows:
                    seq += 1
                    records.append(_record(pending.group, row, seq))
                    keyed.append(((pending.group, row.topic, row.partition), row))
            try:
                self._write(pa.Table.from_pylist(records, schema=OFFSETS_SCHEMA), "append", seq)
            except CommitFailedError as exc:
                logger.info("offsets commit lost a race (attempt %d): %s; re-reading the table", attempt, exc)
                self._refresh_and_load()
                continue
            except _FOREIGN as exc:
                if attempt == self._attempts:
                    raise StorageError(f"cannot write {self.uri}: {exc}", uri=self.uri) from exc
                logger.warning("offsets commit attempt %d failed: %s", attempt, exc)
                time.sleep(min(0.005 * 2**attempt, 1.0))
                self._refresh_and_load()
                continue
            with self._lock:
                for key, row in keyed:
                    self._latest[key] = row
                self._table_rows += len(records)
                self._seq = seq
                self.commits += 1
            return
        raise CommitConflict(
            f"offsets commit lost {self._attempts} races against other writers of {self.uri}"
        )

    def _rewrite(
        self, exclude_group: str | None = None, exclude_keys: set[tuple[str, str, int]] | None = None
    ) -> None:
        """Overwrite the table with the newest rows (minus a deleted group or deleted partitions' rows),
        fenced like an append."""
        drop = exclude_keys or set()
        for attempt in range(1, self._attempts + 1):
            with self._lock:
                latest = {k: v for k, v in self._latest.items() if k[0] != exclude_group and k not in drop}
                seq = self._seq
            records = []
            for (group, _, _), row in sorted(latest.items()):
                seq += 1
                records.append(_record(group, row, seq))
            try:
                self._write(pa.Table.from_pylist(records, schema=OFFSETS_SCHEMA), "overwrite", seq)
            except CommitFailedError as exc:
                logger.info("offsets rewrite lost a race (attempt %d): %s", attempt, exc)
                self._refresh_and_load()
                continue
            except _FOREIGN as exc:
                raise StorageError(f"cannot rewrite {self.uri}: {exc}", uri=self.uri) from exc
            with self._lock:
                self._latest = latest
                self._table_rows = len(records)
                self._seq = seq
                self.compactions += 1
            self._maintain()
            logger.info("rewrote offsets table %s with %d rows", self.uri, len(records))
            return
        raise CommitConflict(
            f"offsets rewrite lost {self._attempts} races against other writers of {self.uri}"
        )

    def _write(self, table: pa.Table, mode: str, seq: int) -> None:
        txn = Transaction(OFFSETS_APP_ID, seq, last_updated=time.time_ns() // 1_000_000)
        write_deltalake(
            self._dt,
            table,
            mode="append" if mode == "append" else "overwrite",
            commit_properties=CommitProperties(app_transactions=[txn]),
        )
        try:
            self._storage.sync_commit(self.uri, self._dt.version())
        except OSError as exc:
            raise StorageError(f"cannot fsync {self.uri}: {exc}", uri=self.uri) from exc

    def _maintain(self) -> None:
        """Keep the log and the directory small after a rewrite (best effort)."""
        try:
            self._dt.create_checkpoint()
            self._dt.cleanup_metadata()
            now = time.monotonic()
            if now - self._last_vacuum > _VACUUM_EVERY_S:
                self._last_vacuum = now
                self._dt.vacuum(dry_run=False)
        except _FOREIGN as exc:
            logger.warning("maintenance of %s failed (harmless, retried later): %s", self.uri, exc)

    # -- open and load -----------------------------------------------------------------------------------

    def _open_or_create(self) -> DeltaTable:
        options = self._storage.options()
        try:
            if self._storage.is_table(self.uri):
                return DeltaTable(self.uri, storage_options=options)
            try:
                dt = DeltaTable.create(
                    self.uri,
                    OFFSETS_SCHEMA,
                    mode="error",
                    name="topiclake_consumer_offsets",
                    configuration=OFFSETS_TABLE_PROPERTIES,
                    storage_options=options,
                )
                logger.info("created offsets table %s", self.uri)
                return dt
            except DeltaError:
                if not self._storage.is_table(self.uri):
                    raise
                return DeltaTable(self.uri, storage_options=options)
        except _FOREIGN as exc:
            raise StorageError(f"cannot open the offsets table {self.uri}: {exc}", uri=self.uri) from exc

    def _refresh_and_load(self) -> None:
        try:
            self._dt.update_incremental()
        except _FOREIGN as exc:
            raise StorageError(f"cannot refresh {self.uri}: {exc}", uri=self.uri) from exc
        self._load()

    def _load(self) -> None:
        """Rebuild the in-memory state from the table: the row with the highest ``commit_seq`` per key."""
        try:
            table = self._dt.to_pyarrow_table()
            fence = self._dt.transaction_version(OFFSETS_APP_ID)
        except _FOREIGN as exc:
            raise StorageError(f"cannot read the offsets table {self.uri}: {exc}", uri=self.uri) from exc
        latest: dict[_Key, tuple[int, CommittedOffset]] = {}
        for r in table.to_pylist():
            key = (r["group"], r["topic"], int(r["partition"]))
            seq = int(r["commit_seq"])
            seen = latest.get(key)
            if seen is None or seq > seen[0]:
                ts = r["commit_timestamp"]
                latest[key] = (
                    seq,
                    CommittedOffset(
                        topic=key[1],
                        partition=key[2],
                        offset=int(r["committed_offset"]),
                        metadata=r["metadata"] or "",
                        commit_timestamp_ms=int(ts.timestamp() * 1000) if ts is not None else 0,
                        member_id=r["member_id"],
                        generation=int(r["generation"]) if r["generation"] is not None else -1,
                    ),
                )
        max_seq = max((s for s, _ in latest.values()), default=0)
        with self._lock:
            self._latest = {k: v for k, (_, v) in latest.items()}
            self._table_rows = table.num_rows
            self._seq = max(max_seq, int(fence or 0))
        logger.debug("loaded offsets table %s: %d rows, %d live", self.uri, table.num_rows, len(latest))


def _record(group: str, row: CommittedOffset, seq: int) -> dict[str, Any]:
    return {
        "group": group,
        "topic": row.topic,
        "partition": row.partition,
        "committed_offset": row.offset,
        "metadata": row.metadata,
        "commit_timestamp": row.commit_timestamp_ms * 1000,
        "member_id": row.member_id,
        "generation": row.generation,
        "commit_seq": seq,
    }


def wait(future: Future[None], timeout_s: float, group: str) -> None:
    """Wait for a submitted commit; translate a timeout."""
    try:
        future.result(timeout=timeout_s)
    except TimeoutError as exc:
        raise RequestTimedOut(
            f"offset commit of group {group} not confirmed within {timeout_s:.1f} s; it may still land",
            group=group,
        ) from exc
