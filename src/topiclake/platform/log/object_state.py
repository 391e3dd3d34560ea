"""A topic table's state on object storage, kept from the log entries the broker itself wrote and read, and
the checkpoints and log cleanup written from it, without delta-rs replays (issue 28).

Measured through the counting proxy (docs/object-storage.md): deltalake 1.6.6 GETs every log entry
twice when a handle replays it, and ``create_checkpoint`` replays again from the previous checkpoint, so
the maintainer's handle cost ~4 GETs of log entries per commit on S3, most of the store's requests per MB.
Yet the broker knows every entry of its topic tables' logs: the flusher's appender PUT its own and read
the winners of the versions it lost (:meth:`~.object_append.ObjectAppender.take_entry`). So the
maintainer keeps the table's state (live files, tombstones, ``txn`` ids, metadata, protocol) here:

- seeded once from the newest checkpoint and the entries after it (one GET each, not two);
- moved on from the entries the appender hands over, GETting only versions it neither wrote nor read;
- checkpointed as the Delta protocol defines a (classic, single-file) checkpoint: the same Parquet columns
  delta-rs 1.6.6 writes, then ``_last_checkpoint``; delta-rs and Spark read it as theirs;
- log entries older than the checkpoint and than the log retention deleted by key (DELETE, no LIST).
"""

from __future__ import annotations

import concurrent.futures
import io
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from topiclake.platform.log._checkpoint_rows import CHECKPOINT_SCHEMA, Tombstones, fit, plain
from topiclake.platform.log.file_index import DataFile, FileIndex, by_offset, data_file_of_add, file_table
from topiclake.platform.storage.s3_client import ObjectClient

_DEFAULT_TOMBSTONES_S = 7 * 24 * 3600  # Delta's delta.deletedFileRetentionDuration default: a week
_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}


class StateGone(Exception):
    """An entry the state needs was deleted (another writer's log cleanup): seed again."""


class ObjectTableState:
    """The state of one topic table's log at :attr:`version`, from its entries (see the module docs).

    Args:
        client: Signed requests to the warehouse's objects.
        table_key: The table's key relative to the warehouse root (``topics/<name>``).
    """

    def __init__(self, client: ObjectClient, table_key: str) -> None:
        self.client = client
        self.table_key = table_key.strip("/")
        self.version = -1
        self.protocol: dict[str, Any] = {}
        self.metadata: dict[str, Any] = {}
        self.txns: dict[str, dict[str, Any]] = {}
        self.adds: dict[str, dict[str, Any]] = {}
        self.tombstones = Tombstones()  # the removed files' actions, until they expire (_checkpoint_rows.py)
        self.entry_times: dict[int, int] = {}  # version -> its commit's timestamp (ms), not yet deleted
        self.checkpoint_version = -1
        self.seeded_at = time.monotonic()  # entries before the seed's checkpoint are not in entry_times
        self._seed_cleaned = -1.0  # the seed whose older entries were cleaned by listing
        self.gets = 0  # log entries and checkpoints read by this state (the rest were handed over)
        self._index: FileIndex | None = None

    def _key(self, name: str) -> str:
        return f"{self.table_key}/_delta_log/{name}"

    # ------------------------------------------------------------------ reading

    def seed(self) -> None:
        """Read the newest checkpoint and every entry after it.

        Raises:
            StateGone: an entry was deleted while it was read (read again).
            OSError: the store did not answer.
            ValueError: a checkpoint this state cannot read (multi-part, V2): use delta-rs.
        """
        gets, cleaned = self.gets, self._seed_cleaned
        self.__init__(self.client, self.table_key)  # type: ignore[misc]
        self.gets, self._seed_cleaned = gets, cleaned
        raw = self.client.get(self._key("_last_checkpoint"))
        start = 0
        if raw is not None:
            hint = orjson.loads(raw)
            if hint.get("parts") or hint.get("v2Checkpoint"):
                raise ValueError("multi-part or V2 checkpoint")
            start = int(hint["version"])
            body = self.client.get(self._key(f"{start:020d}.checkpoint.parquet"))
            self.gets += 1
            if body is None:
                raise StateGone(f"checkpoint {start} gone")
            self._read_checkpoint(body)
            self.version = self.checkpoint_version = start
            start += 1
        version = start
        while True:
            entry = self.client.get(self._key(f"{version:020d}.json"))
            self.gets += 1
            if entry is None:
                break
            self.apply(version, entry)
            version += 1
        if self.version < 0:
            raise StateGone("no log entry found")

    def _read_checkpoint(self, body: bytes) -> None:
        table = pq.read_table(io.BytesIO(body))
        if "remove" in table.column_names:  # most of a busy table's rows: kept as Arrow
            self.tombstones.load(table["remove"])
            table = table.filter(pc.is_null(table["remove"]))
        names = [n for n in ("add", "metaData", "protocol", "txn") if n in table.column_names]
        types = {n: table.schema.field(n).type for n in names}
        for row in table.select(names).to_pylist():
            for name in names:
                if row[name] is not None:
                    self._take({name: plain(row[name], types[name])})

    def catch_up(self, target: int, handed: Callable[[int], bytes | None]) -> None:
        """Move to ``target`` with the entries ``handed`` over (the appender's), GETting the others.

        Raises:
            StateGone: a needed entry was deleted meanwhile.
            OSError: the store did not answer.
        """
        while self.version < target:
            version = self.version + 1
            raw = handed(version)
            if raw is None:
                raw = self.client.get(self._key(f"{version:020d}.json"))
                self.gets += 1
                if raw is None:
                    raise StateGone(f"log entry {version} gone")
            self.apply(version, raw)

    def apply(self, version: int, raw: bytes) -> None:
        """Take in the log entry of ``version`` (the next one)."""
        for line in raw.splitlines():
            if line.strip():
                self._take(orjson.loads(line), version)
        self.version = version
        self._index = None

    def _take(self, action: Mapping[str, Any], version: int | None = None) -> None:
        if "add" in action:
            add = action["add"]
            self.adds[add["path"]] = add
            self.tombstones.discard(add["path"])
        elif "remove" in action:
            remove = action["remove"]
            self.adds.pop(remove["path"], None)
            self.tombstones.add(remove)
        elif "txn" in action:
            self.txns[action["txn"]["appId"]] = action["txn"]
        elif "metaData" in action:
            self.metadata = action["metaData"]
        elif "protocol" in action:
            self.protocol = action["protocol"]
        elif "commitInfo" in action and version is not None:
            self.entry_times[version] = int(action["commitInfo"].get("timestamp") or time.time() * 1000)

    # ------------------------------------------------------------------ what it holds

    def index(self) -> FileIndex:
        """The file index of :attr:`version` (as :func:`~.file_index.build_index` makes from delta-rs)."""
        if self._index is None:
            self._index = FileIndex(self.version, [_data_file(a) for a in self.adds.values()])
        return self._index

    def read_run(self, files: list[DataFile], lo: int, hi: int) -> pa.Table:
        """The records ``lo``..``hi`` of ``files``, sorted by offset: each file one whole-object GET (in
        parallel), where pyarrow's filesystem sends a HEAD and ranged GETs per file.

        Raises:
            OSError: a file is gone or the store did not answer.
        """
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, max(len(files), 1))) as pool:
            bodies = list(pool.map(lambda f: self.client.get(f"{self.table_key}/{f.path}"), files))
        tables = []
        for f, body in zip(files, bodies, strict=True):
            if body is None:
                raise OSError(f"data file {f.path} is gone")
            tables.append(file_table(pq.read_table(pa.BufferReader(body)), f))
        data = by_offset(pa.concat_tables(tables))
        return data.filter(pc.and_(pc.greater_equal(data["offset"], lo), pc.less_equal(data["offset"], hi)))

    def txn_version(self, app_id: str) -> int | None:
        """A ``txn`` id's version, as ``DeltaTable.transaction_version`` answers."""
        txn = self.txns.get(app_id)
        return None if txn is None else int(txn["version"])

    def tombstone_retention_s(self) -> int:
        """The table's ``delta.deletedFileRetentionDuration``, seconds."""
        conf = self.metadata.get("configuration") or {}
        found = re.fullmatch(
            r"interval\s+(\d+)\s+(\w+?)s?", str(conf.get("delta.deletedFileRetentionDuration", ""))
        )
        if found is None or found.group(2) not in _UNITS:
            return _DEFAULT_TOMBSTONES_S
        return int(found.group(1)) * _UNITS[found.group(2)]

    # ------------------------------------------------------------------ writing

    def write_checkpoint(self) -> int:
        """PUT a checkpoint of :attr:`version` and ``_last_checkpoint``; return the version.

        Raises:
            OSError: the store did not take them.
        """
        version = self.version
        expired = (time.time() - self.tombstone_retention_s()) * 1000
        tombstones = self.tombstones.column(expired, set(self.adds))
        rows: list[dict[str, Any]] = [{"protocol": self.protocol}, {"metaData": self.metadata}]
        rows += ({"txn": t} for t in self.txns.values())
        rows += ({"add": a} for a in self.adds.values())
        fitted = [{k: fit(v, CHECKPOINT_SCHEMA.field(k).type) for k, v in row.items()} for row in rows]
        actions = pa.Table.from_pylist(fitted, schema=CHECKPOINT_SCHEMA)
        removes = pa.Table.from_arrays(
            [
                tombstones if f.name == "remove" else _nulls(len(tombstones), f.type)
                for f in CHECKPOINT_SCHEMA
            ],
            schema=CHECKPOINT_SCHEMA,
        )
        sink = pa.BufferOutputStream()
        pq.write_table(pa.concat_tables([actions, removes]), sink, compression="snappy")
        body = sink.getvalue().to_pybytes()
        self.client.put(self._key(f"{version:020d}.checkpoint.parquet"), body)
        hint = {
            "version": version,
            "size": len(rows) + len(tombstones),
            "sizeInBytes": len(body),
            "numOfAddFiles": len(self.adds),
        }
        self.client.put(self._key("_last_checkpoint"), orjson.dumps(hint))
        self.checkpoint_version = version
        return version

    def checkpoint(
        self, retention_ms: int, held: Callable[[], bool], listed_cleanup: Callable[[], object]
    ) -> bool:
        """:meth:`write_checkpoint`, then, unless ``held`` (a reader's log lease), :meth:`cleanup`; the
        entries from before the seed (not in :attr:`entry_times`) by ``listed_cleanup`` (delta-rs's, which
        lists) once they are all past the retention. Returns whether the log was cleaned.

        Raises:
            OSError: the store did not take the checkpoint or a delete.
        """
        self.write_checkpoint()
        if held():
            return False
        self.cleanup(retention_ms)
        if self._seed_cleaned != self.seeded_at and time.monotonic() - self.seeded_at > retention_ms / 1000:
            listed_cleanup()
            self._seed_cleaned = self.seeded_at
        return True

    def cleanup(self, retention_ms: int) -> int:
        """DELETE the log entries this state saw that are older than the newest checkpoint and than
        ``retention_ms``; return how many."""
        cutoff = time.time() * 1000 - retention_ms
        old = [v for v, ts in self.entry_times.items() if v < self.checkpoint_version and ts < cutoff]
        for version in sorted(old):
            self.client.delete(self._key(f"{version:020d}.json"))
            del self.entry_times[version]
        return len(old)


def _data_file(add: Mapping[str, Any]) -> DataFile:
    return data_file_of_add(add, orjson.loads(add.get("stats") or "{}"))


def _nulls(n: int, typ: pa.DataType) -> pa.Array:
    """``n`` null rows of an action column (``pa.nulls`` leaves a struct's required fields null, which
    Parquet refuses)."""
    return pa.array([None] * n, typ)
