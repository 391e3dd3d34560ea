"""The commit path's append to a topic table on a local warehouse, without delta-rs's commit machinery.

Measured with deltalake 1.6.6 on the 2-core machine (docs/decisions.md, "The local append path"): a
delta-rs append of 16 one-record rows costs 4-5 ms on a quiet table and ~10 ms beside a busy event loop,
of which writing the Parquet file is 0.6 ms; the rest is its commit machinery (snapshot bookkeeping,
conflict checker, a Tokio runtime hop). A topic commit is always the same blind append, so on a local
disk the flusher writes it directly, as the Delta protocol (reader 1, writer 2) defines it:

- one Parquet file per (partition, segment), written by pyarrow without the partition columns, named
  like delta-rs's, with the statistics delta-rs writes (``numRecords``, min/max and null counts of the
  scalar columns; timestamps as ISO strings truncated to the millisecond, as delta-rs does);
- one log entry ``_delta_log/<version>.json`` (``commitInfo``, ``add`` and ``txn`` actions), written to
  a temporary file and linked to its name, which fails if the version exists: the put-if-absent every
  Delta writer on a local disk uses, so delta-rs, Spark and this path exclude each other per version.

When the version is taken, :meth:`LocalAppender.commit` reads the winning entries and raises
:class:`LostRace` with what they hold; the caller retries at the next version unless a winner wrote the
topic's own ``txn`` ids or changed the table's metadata or protocol (then it refreshes its snapshot and
rebases, as after a delta-rs conflict). Readers, checkpoints, compaction and vacuum stay delta-rs's.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from topiclake import __version__
from topiclake.platform.log import commit_files
from topiclake.platform.log.commit_files import SMALL_FILE_ROWS as SMALL_FILE_ROWS
from topiclake.platform.log.commit_files import encode as encode
from topiclake.platform.log.commit_files import file_stats as file_stats
from topiclake.platform.log.spare_files import write_new

# moved to .commit_files; kept here for the append paths that import them from this module
_groups = commit_files.groups
_column_stats = commit_files.column_stats

PARTITIONS_JSON = '["partition","segment"]'
ENGINE = f"topiclake/{__version__} (pyarrow {pa.__version__})"
#: Log entries an appender keeps for the maintainer's table state (:meth:`LocalAppender.take_entry`); past
#: that the oldest are dropped (the maintainer reads them from the disk).
ENTRIES_KEPT = 5_000


@dataclass
class Winners:
    """What other writers committed at the versions this writer tried."""

    versions: list[int] = field(default_factory=list)
    txns: dict[str, int] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)  # paths of the files they removed
    changed_table: bool = False  # a metaData or protocol action: the table may no longer be ours to write

    def add_entry(self, version: int, raw: bytes) -> str | None:
        """Take in the log entry ``raw`` another writer committed at ``version``; return its
        ``topiclake.commit`` id (None: not a topiclake commit)."""
        commit_id = None
        for line in raw.splitlines():
            if not line.strip():
                continue
            action = orjson.loads(line)
            if "txn" in action:
                txn = action["txn"]
                self.txns[txn["appId"]] = int(txn["version"])
            elif "remove" in action:
                self.removed.add(str(action["remove"]["path"]))
            elif "metaData" in action or "protocol" in action:
                self.changed_table = True
            elif "commitInfo" in action:
                commit_id = action["commitInfo"].get("topiclake.commit")
        self.versions.append(version)
        return commit_id


class LostRace(Exception):
    """Another writer committed the version this writer tried; ``winners`` says what it wrote."""

    def __init__(self, winners: Winners) -> None:
        super().__init__(f"versions {winners.versions} were taken by other writers")
        self.winners = winners


class LocalAppender:
    """Blind appends to one topic table in a local directory, at ``version + 1`` each time."""

    def __init__(self, root: str, version: int) -> None:
        self.root = root
        self.log_dir = os.path.join(root, "_delta_log")
        self.version = version  # the newest version this writer knows to exist
        self._dirs: set[str] = set()
        #: the last :meth:`write_files`' rows by (partition, segment): zero-copy slices of one table, which
        #: the flusher hands to the partitions' tail caches instead of joining each partition's batches
        self.last_groups: list[tuple[tuple[int, int], pa.Table]] = []
        self._entries: dict[int, bytes] = {}  # version -> entry, written or read here (take_entry)
        self._entries_lock = threading.Lock()

    # ------------------------------------------------------------------ data files

    def write_files(self, data: pa.Table, data_change: bool = True) -> list[dict[str, dict[str, object]]]:
        """Write ``data`` (topic schema, partition columns included) as one Parquet file per (partition,
        segment) and return their ``add`` actions (``data_change`` False: a rewrite of records already
        in the table, which streaming readers skip)."""
        split = commit_files.split(data)
        groups = split.groups()
        self.last_groups = groups
        stats = commit_files.split_stats(split)
        stored = commit_files.Stored(split.table)
        encoded = [stored.encode(start, n) for start, n in zip(split.starts, split.counts, strict=True)]
        now = int(time.time() * 1000)
        return [
            self._write_group(key, rows, now, data_change, st, enc)
            for (key, rows), st, enc in zip(groups, stats, encoded, strict=True)
        ]

    def _write_group(
        self,
        key: tuple[int, int],
        rows: pa.Table,
        now: int,
        data_change: bool,
        stats: dict[str, object],
        encoded: pa.Buffer,
    ) -> dict[str, dict[str, object]]:
        partition, segment = key
        rel = f"partition={partition}/segment={segment}"
        folder = os.path.join(self.root, rel)
        if folder not in self._dirs:
            os.makedirs(folder, exist_ok=True)
            self._dirs.add(folder)
        path = write_new(folder, "part-00000-", "-c000.snappy.parquet", memoryview(encoded))
        add = {
            "path": f"{rel}/{os.path.basename(path)}",
            "partitionValues": {"partition": str(partition), "segment": str(segment)},
            "size": encoded.size,
            "modificationTime": now,
            "dataChange": data_change,
            "stats": orjson.dumps(stats).decode(),
        }
        return {"add": add}

    # ------------------------------------------------------------------ log entries

    def stale(self) -> bool:
        """Whether a checkpoint newer than :attr:`version` exists: log entries after ``version`` may then
        have been cleaned up, so a link at ``version + 1`` could succeed on a table that moved on. The
        caller must refresh before committing. Cleanup never deletes entries newer than the latest
        checkpoint, so while this is False every taken version still has its entry."""
        try:
            with open(os.path.join(self.log_dir, "_last_checkpoint"), "rb") as fh:
                checkpoint = int(orjson.loads(fh.read())["version"])
        except (FileNotFoundError, KeyError, ValueError, orjson.JSONDecodeError):
            return False
        return checkpoint > self.version

    def commit(self, actions: Sequence[Mapping[str, object]]) -> int:
        """Write ``actions`` as the log entry of ``version + 1`` and return that version.

        Raises:
            LostRace: the version exists; :attr:`version` has moved past the winners, so calling again
                tries the next free version.
        """
        target = self.version + 1
        body = b"".join(orjson.dumps(a) + b"\n" for a in actions)
        tmp = write_new(self.log_dir, "_commit_", ".json.tmp", body)
        try:
            os.link(tmp, self.entry(target))
        except FileExistsError:
            raise LostRace(self._read_winners(target)) from None
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
            raise LostRace(self._read_winners(target)) from None
        finally:
            os.unlink(tmp)
        self.version = target
        self._record(target, body)
        return target

    def entry(self, version: int) -> str:
        return os.path.join(self.log_dir, f"{version:020d}.json")

    def _record(self, version: int, body: bytes) -> None:
        """Keep the log entry of ``version`` for :meth:`take_entry`."""
        with self._entries_lock:
            self._entries[version] = body
            if len(self._entries) > ENTRIES_KEPT:
                del self._entries[next(iter(self._entries))]

    def take_entry(self, version: int) -> bytes | None:
        """The log entry of ``version`` if this appender wrote or read it (once: it is forgotten then,
        with every older one); None: read it from the disk (:mod:`.local_state`)."""
        with self._entries_lock:
            body = self._entries.pop(version, None)
            if self._entries and next(iter(self._entries)) < version:
                for old in [v for v in self._entries if v < version]:
                    del self._entries[old]
        return body

    def _read_winners(self, first: int) -> Winners:
        winners = Winners()
        version = first
        while True:
            try:
                with open(self.entry(version), "rb") as fh:
                    raw = fh.read()
            except FileNotFoundError:
                break
            winners.add_entry(version, raw)
            self._record(version, raw)
            version += 1
        self.version = max(self.version, version - 1)
        return winners


def commit_info(
    operation_metrics: dict[str, str], custom: dict[str, str], compaction: bool = False
) -> dict[str, object]:
    """The ``commitInfo`` action of a topic append, or of a compaction (Spark's names and metrics as
    strings; a compaction is recorded as Delta's OPTIMIZE)."""
    if compaction:
        operation, parameters = "OPTIMIZE", {"predicate": "[]", "zOrderBy": "[]"}
    else:
        operation, parameters = "WRITE", {"mode": "Append", "partitionBy": PARTITIONS_JSON}
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": parameters,
            "isBlindAppend": not compaction,
            "operationMetrics": operation_metrics,
            "engineInfo": ENGINE,
            "clientVersion": ENGINE,
            **custom,
        }
    }


def added_bytes(adds: Sequence[Mapping[str, Mapping[str, object]]]) -> int:
    """The bytes of the data files that ``add`` actions add."""
    return sum(int(str(a["add"]["size"])) for a in adds)


def remove_action(path: str, partition: int, segment: int, size: int) -> dict[str, object]:
    """The ``remove`` of a data file a compaction rewrote (no data change: the records stay)."""
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": int(time.time() * 1000),
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": {"partition": str(partition), "segment": str(segment)},
            "size": size,
        }
    }


def txn_action(app_id: str, version: int, last_updated_ms: int) -> dict[str, object]:
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": last_updated_ms}}
