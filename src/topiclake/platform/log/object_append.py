"""The commit path's append to a topic table on S3, without delta-rs's commit machinery.

Measured through the counting proxy with every request delayed 20 ms (issue 28, docs/object-storage.md):
a delta-rs commit on S3 is ~10 sequential round trips (LISTs for newer versions before and after, GETs
of its own entry, HEADs) and ~70 requests per MB under load. A topic commit is always the same blind
append, so on S3 the flusher writes it as the local path (:mod:`.fast_append`) does, as the Delta
protocol (reader 1, writer 2) defines it:

- the commit's Parquet files (one per partition and segment, encoded by pyarrow with the statistics
  delta-rs writes) are PUT in parallel, before the log entry (nothing references them until it lands);
- the log entry ``_delta_log/<version>.json`` is ONE conditional PUT (``If-None-Match: *``), the
  put-if-absent delta-rs itself uses on S3, so delta-rs, Spark's delta-rs sink and this path exclude
  each other per version. The writer knows the version it expects: no LIST, no GET on the steady path.

While a log entry's PUT is in flight, the flusher stores the data files of what was queued meanwhile
(the next commit's, :meth:`~._local.LogLocal._prefetch`), so under load a commit costs the flusher one
round trip, not two.

On 412 (Azure: 409) the version is taken: one GET reads the winning entry. If it is this commit's own (its
``topiclake.commit`` id: an earlier attempt landed but its answer was lost, e.g. a cut connection), the
commit is done; otherwise :class:`~.fast_append.LostRace` tells the caller what the winner wrote, as on a
local disk (retry at the next version, or refresh and rebase when a winner wrote our ``txn`` ids).

Stale after cleanup: log cleanup deletes entries older than the newest checkpoint *and* than the log
retention. Every version past the one this writer last confirmed as the newest (by a PUT that landed or
a snapshot refresh) was written after that moment, so for ``fresh_s`` (half the retention) none of them
can be gone and a landed PUT cannot reuse a version; past that, one GET of ``_last_checkpoint`` decides,
as the local path does before every commit.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from topiclake.platform.log.fast_append import LostRace, Winners, _groups, file_stats
from topiclake.platform.storage.s3_client import ObjectClient

logger = logging.getLogger(__name__)

#: Other writers' entries an appender remembers for compaction (:meth:`ObjectAppender.removed_since`).
WINNERS_KEPT = 256
#: Log entries an appender keeps for the maintainer's table state (:meth:`ObjectAppender.take_entry`);
#: past that the oldest are dropped (the maintainer GETs them).
ENTRIES_KEPT = 5_000

_pool_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_ahead: concurrent.futures.ThreadPoolExecutor | None = None


def _uploads() -> concurrent.futures.ThreadPoolExecutor:
    """One pool per process for data-file PUTs (threads wait on the network, not on the GIL)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="s3-put")
        return _pool


def ahead() -> concurrent.futures.ThreadPoolExecutor:
    """One pool per process for work done while a log entry's PUT is in flight (storing the next
    commit's files, gathering their requests first for at most that PUT); apart from :func:`_uploads`,
    whose tasks it waits for, so it never starves it."""
    global _ahead
    with _pool_lock:
        if _ahead is None:
            _ahead = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="s3-ahead")
        return _ahead


class ObjectAppender:
    """Blind appends to one topic table on S3 or Azure, at ``version + 1`` each time.

    Args:
        client: Signed requests to the warehouse's objects.
        table_key: The table's key relative to the warehouse root (``topics/<name>``).
        version: The newest version known to exist.
        fresh_s: How long a confirmed version stays safe from log cleanup (half the log retention).
    """

    def __init__(self, client: ObjectClient, table_key: str, version: int, fresh_s: float) -> None:
        self.client = client
        self.table_key = table_key.strip("/")
        self._version = version
        self._confirmed = time.monotonic()  # when version + 1 was last known not to exist
        self.fresh_s = fresh_s
        self.put_ms = 20.0  # moving average of a log-entry PUT's round trip: the store's latency
        self.races = 0
        self.landed_unseen = 0  # commits found landed after their answer was lost
        self.stored_ahead = 0  # commits whose files were stored during the previous log PUT
        self.orphans_deleted = 0  # files stored for commits that no entry names (delete_files)
        # other writers' entries this appender read (412s), newest last: with ``unread``, what a compaction
        # needs to know of the versions between its file index and this appender's version
        self.winners_read: deque[tuple[int, Winners]] = deque(maxlen=WINNERS_KEPT)
        self.unread = version  # every version in (unread, version] was this appender's or read by it
        # the bodies of the entries this appender wrote or read, until the maintainer takes them
        self._entries: dict[int, bytes] = {}
        self._entries_lock = threading.Lock()

    @property
    def version(self) -> int:
        """The newest table version this writer knows to exist."""
        return self._version

    @version.setter
    def version(self, version: int) -> None:
        # set by a snapshot refresh, which listed the log: nothing after it existed then
        if version >= self._version:
            self._confirmed = time.monotonic()
        if version > self._version:  # versions this appender neither wrote nor read
            self.unread = version
        self._version = max(self._version, version)

    def record(self, version: int, body: bytes) -> None:
        """Keep the log entry of ``version`` for :meth:`take_entry` (written or read by this process)."""
        with self._entries_lock:
            self._entries[version] = body
            if len(self._entries) > ENTRIES_KEPT:
                del self._entries[next(iter(self._entries))]

    def take_entry(self, version: int) -> bytes | None:
        """The log entry of ``version`` if this process wrote or read it (handed over once: the
        maintainer's table state, :mod:`.object_state`), dropping older ones; None: read it."""
        with self._entries_lock:
            body = self._entries.pop(version, None)
            for old in [v for v in self._entries if v < version]:
                del self._entries[old]
            return body

    def removed_since(self, version: int, paths: set[str]) -> bool | None:
        """Whether another writer's entry after ``version``, up to :attr:`version`, removed one of
        ``paths`` or changed the table; None when this appender cannot tell (it skipped entries it did not
        read, e.g. after a snapshot refresh), without a request."""
        if self.unread > version:
            return None
        return any(v > version and (w.changed_table or w.removed & paths) for v, w in list(self.winners_read))

    def moved_past(self, version: int, winners: Winners) -> None:
        """Another writer of this process (compaction) wrote ``winners`` at ``version``: if that is the
        one after :attr:`version`, take it as read, no request (else the next 412 reads it; a snapshot
        refresh outside the commit lock may have moved this appender meanwhile)."""
        if version != self._version + 1:
            return
        self._read_winner(version, winners)
        self._version = version
        self._confirmed = time.monotonic()  # its PUT just landed: nothing after it existed

    def _read_winner(self, version: int, winners: Winners) -> None:
        if len(self.winners_read) == self.winners_read.maxlen:
            self.unread = max(self.unread, self.winners_read[0][0])  # forgotten from here on
        self.winners_read.append((version, winners))

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    # ------------------------------------------------------------------ data files

    def write_files(self, data: pa.Table, data_change: bool = True) -> list[dict[str, dict[str, object]]]:
        """PUT ``data`` (topic schema, partition columns included) as one Parquet file per (partition,
        segment), in parallel, and return their ``add`` actions.

        Raises:
            OSError: A PUT failed until the client's deadline.
        """
        return self.write_tables([data], data_change)

    def write_tables(
        self, tables: Sequence[pa.Table], data_change: bool = True
    ) -> list[dict[str, dict[str, object]]]:
        """:meth:`write_files` of several tables at once, each (partition, segment) of each table its own
        file (a compaction round: one file per run, even for two runs of one segment)."""
        now = int(time.time() * 1000)
        groups = [(key, rows) for data in tables for key, rows in _groups(data)]
        if len(groups) == 1:
            return [self._store(*groups[0], now, data_change)]
        # each file encoded and PUT on a pool thread (pyarrow encodes without the GIL): a file's PUT
        # starts when its own encoding is done, not after every file's
        futures = [_uploads().submit(self._store, key, rows, now, data_change) for key, rows in groups]
        return [future.result() for future in futures]

    def delete_files(self, adds: Sequence[Mapping[str, Mapping[str, object]]]) -> None:
        """Delete, off the caller's thread, data files stored for a commit that no log entry names (its
        batches moved, or it was rebuilt after a lost race): the broker's vacuum on object storage is a
        lite one, which deletes only files a ``remove`` names, so they would stay until a full vacuum."""
        keys = [f"{self.table_key}/{add['add']['path']}" for add in adds]
        if keys:
            self.orphans_deleted += len(keys)
            ahead().submit(self._delete, keys)

    def _delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self.client.delete(key)
            except Exception as exc:  # a closed client, the store gone: a full vacuum removes them
                logger.info("%s: an unreferenced file not deleted (%s)", self.table_key, exc)
                return

    def _store(
        self, key: tuple[int, int], rows: pa.Table, now: int, data_change: bool
    ) -> dict[str, dict[str, object]]:
        put, add = self._encode(key, rows, now, data_change)
        self.client.put(*put)
        return add

    def _encode(
        self, key: tuple[int, int], rows: pa.Table, now: int, data_change: bool
    ) -> tuple[tuple[str, bytes], dict[str, dict[str, object]]]:
        partition, segment = key
        sink = pa.BufferOutputStream()
        pq.write_table(rows.drop_columns(["partition", "segment"]), sink, compression="snappy")
        body = sink.getvalue().to_pybytes()
        rel = f"partition={partition}/segment={segment}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        add = {
            "path": rel,
            "partitionValues": {"partition": str(partition), "segment": str(segment)},
            "size": len(body),
            "modificationTime": now,
            "dataChange": data_change,
            "stats": orjson.dumps(file_stats(rows)).decode(),
        }
        return (f"{self.table_key}/{rel}", body), {"add": add}

    # ------------------------------------------------------------------ log entries

    def stale(self) -> bool:
        """Whether a checkpoint newer than :attr:`version` may have let cleanup delete entries after it
        (see the module docs): False without a request while the version was confirmed less than
        ``fresh_s`` ago; else one GET of ``_delta_log/_last_checkpoint``."""
        if time.monotonic() - self._confirmed < self.fresh_s:
            return False
        raw = self.client.get(f"{self.table_key}/_delta_log/_last_checkpoint")
        if raw is None:
            return False
        try:
            checkpoint = int(orjson.loads(raw)["version"])
        except (KeyError, ValueError, TypeError, orjson.JSONDecodeError):
            return False
        return checkpoint > self._version

    def commit(self, actions: Sequence[Mapping[str, object]], commit_id: str) -> int:
        """Write ``actions`` as the log entry of ``version + 1`` (one conditional PUT) and return that
        version; ``commit_id`` is the ``topiclake.commit`` of its ``commitInfo``, how a retry whose first
        answer was lost recognises its own entry.

        Raises:
            LostRace: another writer has the version; :attr:`version` moved past it, so calling again
                tries the next one.
            OSError: the store did not take it before the client's deadline (the entry may still land:
                the caller treats the outcome as unknown).
        """
        target = self._version + 1
        body = b"".join(orjson.dumps(a) + b"\n" for a in actions)
        started = time.monotonic()
        if self.client.put_if_absent(self.entry(target), body):
            elapsed_ms = (time.monotonic() - started) * 1000
            self.put_ms += (elapsed_ms - self.put_ms) * 0.2
            self._version = target
            self._confirmed = started  # target + 1 did not exist before our entry did
            self.record(target, body)
            return target
        raw = self.client.get(self.entry(target))
        if raw is None:  # taken, yet gone: cleaned up, so this writer's version was stale
            self._version = target
            gone = Winners(versions=[target], changed_table=True)
            self._read_winner(target, gone)
            raise LostRace(gone)
        winners = _winners(target, raw)
        self.record(target, raw)
        if winners.commit_id == commit_id:
            self.landed_unseen += 1
            logger.warning("%s: commit %s found landed at version %d", self.table_key, commit_id, target)
            self._version = target
            self._confirmed = started
            return target
        self.races += 1
        self._version = target
        self._read_winner(target, winners)
        raise LostRace(winners)

    def entry(self, version: int) -> str:
        """The key of a version's log entry."""
        return f"{self.table_key}/_delta_log/{version:020d}.json"


@dataclass
class _Winners(Winners):
    commit_id: str | None = None  # the winner's topiclake.commit: ours when an earlier attempt landed


def _winners(version: int, raw: bytes) -> _Winners:
    winners = _Winners()
    winners.commit_id = winners.add_entry(version, raw)
    return winners
