"""The registry's state and its Delta table: every change is one appended row, fenced by a ``txn``.

All changes go through :meth:`SchemaStore.change`: under a lock it refreshes the snapshot, replays rows it
has not seen, checks that the table's ``txn`` version (app id ``topiclake/schema_registry``) equals the last
``seq`` it knows, lets the caller compute the new rows from that state (a new schema id is the highest id +
1), and commits them with the txn version moved to the new last ``seq``. Two brokers that compute a change on
the same snapshot cannot both commit (Delta's conflict check on the txn): the loser re-reads and computes
again, so schema ids are never handed out twice. Reads refresh the snapshot at most every
``refresh_interval`` seconds, and always when asked for something the state does not hold. A state object
is never changed once handed out (a change builds a new one), so readers may iterate it without a lock.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from topiclake.errors import CommitConflict, StorageError
from topiclake.platform.storage import Storage
from topiclake.schema_registry.formats import Reference
from topiclake.schemas import SYSTEM_TABLE_PROPERTIES
from topiclake.schemas.schema_registry import SCHEMAS_SCHEMA, SCHEMAS_TABLE

logger = logging.getLogger(__name__)

__all__ = ["RegistryState", "SchemaStore", "StoredSchema", "VersionEntry"]

_APP_ID: Final = "topiclake/schema_registry"
_MAX_ATTEMPTS: Final = 16


@dataclass(frozen=True)
class StoredSchema:
    """A schema under its global id."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()


@dataclass
class VersionEntry:
    """A version of a subject: the schema id it points to, and whether it is soft-deleted."""

    version: int
    schema_id: int
    deleted: bool = False


@dataclass
class RegistryState:
    """Everything the registry knows, rebuilt by replaying the table's rows in ``seq`` order."""

    seq: int = 0
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    subjects: dict[str, dict[int, VersionEntry]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)

    def next_id(self) -> int:
        """The id a new schema gets."""
        return max(self.schemas, default=0) + 1

    def apply(self, row: dict[str, Any]) -> None:
        """Replay one row."""
        kind, subject, version = row["kind"], row["subject"], row["version"]
        if kind == "schema":
            sid = int(row["schema_id"])
            if sid not in self.schemas:
                refs = tuple(Reference(**r) for r in json.loads(row["references"] or "[]"))
                self.schemas[sid] = StoredSchema(sid, row["schema_type"], row["schema"], refs)
            self.subjects.setdefault(subject, {})[version] = VersionEntry(version, sid)
        elif kind == "soft_delete":
            entry = self.subjects.get(subject, {}).get(version)
            if entry is not None:
                entry.deleted = True
        elif kind == "hard_delete":
            versions = self.subjects.get(subject, {})
            versions.pop(version, None)
            if not versions:
                self.subjects.pop(subject, None)
                self.configs.pop(subject, None)
                self.modes.pop(subject, None)
        elif kind in ("config", "mode"):
            target = self.configs if kind == "config" else self.modes
            if row["value"] is None:
                target.pop(subject, None)
            else:
                target[subject] = row["value"]
        self.seq = int(row["seq"])


def row(kind: str, subject: str | None = None, version: int | None = None, **values: Any) -> dict[str, Any]:
    """A row of the table (``seq`` and ``ts_ms`` are filled in at commit)."""
    return {"kind": kind, "subject": subject, "version": version, **values}


class SchemaStore:
    """The table ``_system/schemas`` and the state replayed from it.

    Args:
        storage: The warehouse.
        refresh_interval: Longest time (seconds) a read may serve state without checking the table for
            changes made by other brokers.
    """

    def __init__(self, storage: Storage, refresh_interval: float = 0.5) -> None:
        self._storage = storage
        self._uri = storage.system_uri(SCHEMAS_TABLE)
        self._refresh_interval = refresh_interval
        self._lock = threading.RLock()
        self._dt: DeltaTable | None = None
        self._state = RegistryState()
        self._loaded_version = -1
        self._checked = 0.0

    def state(self, fresh: bool = False) -> RegistryState:
        """The current state (re-read first when the table moved; ``fresh`` always checks)."""
        with self._lock:
            if fresh or time.monotonic() - self._checked >= self._refresh_interval:
                self._refresh()
            return self._state

    def change(self, compute: Callable[[RegistryState], list[dict[str, Any]]]) -> RegistryState:
        """Commit the rows ``compute`` derives from the freshest state; returns the state after them.

        ``compute`` may raise (the change is then refused and nothing is written) and may be called more
        than once when another broker commits first.
        """
        with self._lock:
            for attempt in range(1, _MAX_ATTEMPTS + 1):
                self._refresh()
                dt = self._table()
                fence = self._txn_version(dt)
                if fence != self._state.seq:
                    logger.warning(
                        "schema registry state at seq %d, table txn at %d: reloading", self._state.seq, fence
                    )
                    self._load(dt, full=True)
                    continue
                rows = compute(self._state)
                if not rows:
                    return self._state
                now = time.time_ns() // 1_000_000
                for i, r in enumerate(rows, start=1):
                    r["seq"] = self._state.seq + i
                    r["ts_ms"] = now
                last = self._state.seq + len(rows)
                table = pa.Table.from_pylist(
                    [{name: r.get(name) for name in SCHEMAS_SCHEMA.names} for r in rows],
                    schema=SCHEMAS_SCHEMA,
                )
                props = CommitProperties(app_transactions=[Transaction(_APP_ID, last, last_updated=now)])
                try:
                    write_deltalake(dt, table, mode="append", commit_properties=props)
                except CommitFailedError as exc:
                    logger.info("schema registry change lost a race (attempt %d): %s", attempt, exc)
                    continue
                except (DeltaError, OSError) as exc:
                    raise StorageError(f"cannot write {self._uri}: {exc}", uri=self._uri) from exc
                self._storage.sync_commit(self._uri, dt.version())
                after = copy.deepcopy(self._state)
                for r in rows:
                    after.apply(r)
                self._state = after
                self._loaded_version = -1 if dt.version() != self._loaded_version + 1 else dt.version()
                logger.info("schema registry commit: seq %d (%s)", last, ", ".join(r["kind"] for r in rows))
                return self._state
        raise CommitConflict(f"schema registry: concurrent changes won {_MAX_ATTEMPTS} times")

    # ------------------------------------------------------------------ table

    def _table(self) -> DeltaTable:
        if self._dt is not None:
            return self._dt
        options = self._storage.options()
        try:
            if not self._storage.is_table(self._uri):
                try:
                    DeltaTable.create(
                        self._uri,
                        SCHEMAS_SCHEMA,
                        mode="error",
                        name="topiclake_schemas",
                        configuration=SYSTEM_TABLE_PROPERTIES,
                        storage_options=options,
                    )
                    logger.info("created schema registry table %s", self._uri)
                except DeltaError as exc:
                    logger.info("schema registry table %s created concurrently (%s)", self._uri, exc)
            self._dt = DeltaTable(self._uri, storage_options=options)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot open {self._uri}: {exc}", uri=self._uri) from exc
        return self._dt

    def _refresh(self) -> None:
        self._checked = time.monotonic()
        if self._dt is None and not self._storage.is_table(self._uri):
            return  # nothing registered yet anywhere
        dt = self._table()
        try:
            dt.update_incremental()
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot refresh {self._uri}: {exc}", uri=self._uri) from exc
        if dt.version() != self._loaded_version:
            self._load(dt)

    def _load(self, dt: DeltaTable, full: bool = False) -> None:
        """Replay the rows after the last ``seq`` applied (all of them when ``full``)."""
        try:
            version = dt.version()
            table = dt.to_pyarrow_table()
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot read {self._uri}: {exc}", uri=self._uri) from exc
        state = RegistryState() if full else copy.deepcopy(self._state)
        rows = sorted(table.to_pylist(), key=lambda r: r["seq"])
        for r in rows:
            if r["seq"] > state.seq:
                state.apply(r)
        self._state = state
        self._loaded_version = version
        logger.debug("schema registry loaded %s at version %d: seq %d", self._uri, version, self._state.seq)

    @staticmethod
    def _txn_version(dt: DeltaTable) -> int:
        try:
            version = dt.transaction_version(_APP_ID)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot read the schema registry table: {exc}") from exc
        return 0 if version is None else int(version)
