"""A local topic table's file index and ``txn`` ids, kept by the maintenance thread from the log entries the
broker wrote, without delta-rs replays (issue 30).

Profiled under Kafka's EndToEndLatency (one record a commit, ~200 commits/s): the maintainer's delta-rs
handle, brought up to date every ``compact_min_files`` commits to build the file index compaction looks
at, cost the broker 1.1-1.2 ms of CPU per record on delta-rs's Tokio threads (a listing of ``_delta_log``
and a replay per round), beside ~4 ms of Python: on two cores, CPU the commit path and the fetch long-poll
need. Yet the flusher's appender wrote every entry of its topic's log, or read it when it lost a version
(:meth:`~.fast_append.LocalAppender.take_entry`). So, as on object storage (:mod:`.object_state`), the
maintainer keeps the table's live files and ``txn`` ids from those entries:

- seeded once from a delta-rs snapshot (its file index and, for ``txn`` ids no entry since has written, its
  ``transaction_version``);
- moved on from the entries the appender hands over, reading from the disk only the versions it neither
  wrote nor read (compaction's own commits, vacuum's, other writers');
- seeded again from delta-rs when a needed entry is gone (another writer's log cleanup ran past it) or an
  entry adds a file without offset statistics (a foreign writer's: delta-rs's index reads the footer).

Checkpoints, log cleanup and vacuum stay delta-rs's; they are due every few seconds, not every round.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson
from deltalake import DeltaTable

from topiclake.platform.log.file_index import DataFile, FileIndex, build_index, data_file_of_add
from topiclake.platform.storage.delta_state import read_txn


class SeedAgain(Exception):
    """The entries since the state's version cannot bring it up to date: seed again from delta-rs."""


class LocalTableState:
    """The live files and ``txn`` ids of a local topic table at :attr:`version` (see the module docs).

    Args:
        uri: The table's directory.
        open_table: Opens a fresh delta-rs snapshot of the table (the seed).
        fs: The table's pyarrow filesystem (the seed's index reads footers of files without statistics).
    """

    def __init__(self, uri: str, open_table: Callable[[], DeltaTable], fs: Any) -> None:
        self.log_dir = os.path.join(uri, "_delta_log")
        self._open_table = open_table
        self._fs = fs
        self.version = -1
        self._files: dict[str, DataFile] = {}
        self._txns: dict[str, int] = {}
        self._seed: DeltaTable | None = None
        self._index: FileIndex | None = None
        self.seeds = 0  # delta-rs snapshots opened (for tests and metrics)
        self.entries_read = 0  # entries read from the disk (the rest were handed over)

    def seed(self) -> None:
        """Start again from a fresh delta-rs snapshot.

        Raises:
            DeltaError, OSError: the table cannot be read.
        """
        table = self._open_table()
        index = build_index(table, self._fs)
        self._files = {f.path: f for p in index.partitions() for f in index.files(p)}
        self._txns = {}
        self._seed = table
        self.version = table.version()
        self._index = index
        self.seeds += 1

    def catch_up(self, handed: Callable[[int], bytes | None]) -> None:
        """Apply every entry after :attr:`version` that exists: those ``handed`` over, the others read
        from the disk; seeded first when there is no state yet, again when an entry needed is gone.

        Raises:
            DeltaError, OSError: the table cannot be read.
        """
        if self.version < 0:
            self.seed()
        for _ in range(3):
            try:
                self._advance(handed)
                return
            except SeedAgain:
                self.seed()  # the newest snapshot: a valid state even when entries keep coming

    def _advance(self, handed: Callable[[int], bytes | None]) -> None:
        while True:
            version = self.version + 1
            raw = handed(version)
            if raw is None:
                raw = self._read(version)
            if raw is None:
                if self._checkpoint_version() > self.version:  # entries after us may be cleaned up
                    raise SeedAgain(f"log entry {version} missing behind a newer checkpoint")
                return
            self.apply(version, raw)

    def _read(self, version: int) -> bytes | None:
        try:
            with open(os.path.join(self.log_dir, f"{version:020d}.json"), "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return None
        self.entries_read += 1
        return raw

    def _checkpoint_version(self) -> int:
        try:
            with open(os.path.join(self.log_dir, "_last_checkpoint"), "rb") as fh:
                return int(orjson.loads(fh.read())["version"])
        except (FileNotFoundError, KeyError, ValueError, orjson.JSONDecodeError):
            return -1

    def apply(self, version: int, raw: bytes) -> None:
        """Take in the log entry of ``version`` (the next one).

        Raises:
            SeedAgain: it adds a file whose offsets its statistics do not tell.
        """
        for line in raw.splitlines():
            if not line.strip():
                continue
            action = orjson.loads(line)
            if "add" in action:
                add = action["add"]
                self._files[add["path"]] = data_file(add)
            elif "remove" in action:
                self._files.pop(action["remove"]["path"], None)
            elif "txn" in action:
                self._txns[action["txn"]["appId"]] = int(action["txn"]["version"])
        self.version = version
        self._index = None

    def index(self) -> FileIndex:
        """The file index of :attr:`version`."""
        if self._index is None:
            self._index = FileIndex(self.version, list(self._files.values()))
        return self._index

    def txn_version(self, app_id: str) -> int | None:
        """A ``txn`` id's version at :attr:`version`, as ``DeltaTable.transaction_version`` answers."""
        if app_id in self._txns:
            return self._txns[app_id]
        return None if self._seed is None else read_txn(self._seed, app_id)


def data_file(add: dict[str, Any]) -> DataFile:
    """The :class:`DataFile` of an ``add`` action whose statistics give its offsets (as this broker's
    appenders write them).

    Raises:
        SeedAgain: they do not.
    """
    stats = orjson.loads(add.get("stats") or "{}")
    if "offset" not in (stats.get("minValues") or {}) or "offset" not in (stats.get("maxValues") or {}):
        raise SeedAgain(f"no offset statistics for {add['path']}")
    return data_file_of_add(add, stats)
