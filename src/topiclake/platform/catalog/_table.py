"""The topic catalog's Delta side: open or create ``_system/topics``, the fenced append of a change (retried
after a lost race), and loading the state from the snapshot. Split from :mod:`.topic_catalog` (its
docstring tells the protocol).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from topiclake.errors import CommitConflict, StorageError
from topiclake.platform.catalog._base import (
    _MAX_ATTEMPTS,
    CatalogBase,
    _app_id,
    _Change,
    _from_record,
    _now_ms,
    _Row,
    _to_record,
)
from topiclake.platform.catalog.system_objects import SystemObjects, VersionMarker
from topiclake.platform.storage.delta_state import read_txn
from topiclake.schemas import CATALOG_SCHEMA, SYSTEM_TABLE_PROPERTIES

logger = logging.getLogger("topiclake.platform.catalog")  # one logger for all parts


class CatalogTable(CatalogBase):
    """Reading and writing the catalog table."""

    def _apply(self, name: str, change: _Change) -> _Row:
        """Append the row ``change`` derives from the freshest state of ``name``, fenced by its txn."""
        app_id = _app_id(name)
        with self._lock:
            for attempt in range(1, _MAX_ATTEMPTS + 1):
                self._update_snapshot()
                self._load_if_changed()
                current = self._rows.get(name)
                base = current.info.revision if current else 0
                fence = self._txn_version(app_id)
                if fence != base:
                    # The snapshot holds a change of this topic the state does not show: reload everything.
                    logger.warning(
                        "catalog state of %s at revision %d but its txn is at %d; reloading",
                        name,
                        base,
                        fence,
                    )
                    self._load()
                    continue
                row = change(current)
                if row is None:
                    assert current is not None
                    return current
                try:
                    self._commit(row)
                except CommitFailedError as exc:
                    logger.info(
                        "catalog change of %s based on revision %d lost a race (attempt %d): %s",
                        name,
                        base,
                        attempt,
                        exc,
                    )
                    continue
                return row
        raise CommitConflict(
            f"could not change topic {name!r}: concurrent catalog changes won {_MAX_ATTEMPTS} times",
            topic=name,
        )

    def _commit(self, row: _Row) -> None:
        """Append one row with its txn fence; update the in-memory state on success."""
        info = row.info
        table = pa.Table.from_pylist([_to_record(row)], schema=CATALOG_SCHEMA)
        props = CommitProperties(
            app_transactions=[Transaction(_app_id(info.name), info.revision, last_updated=_now_ms())]
        )
        before = self._dt.version()
        try:
            write_deltalake(self._dt, table, mode="append", commit_properties=props)
        except CommitFailedError:
            raise
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot write the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        after = self._dt.version()
        self._rows[info.name] = row
        if after == before + 1 and self._loaded_version == before:
            self._loaded_version = after
        else:
            # The commit was rebased over other commits this state has not read yet.
            self._load()
        try:
            self._storage.sync_commit(self._uri, after)
        except OSError as exc:
            raise StorageError(f"cannot fsync the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        logger.debug("catalog commit %d: %s revision %d", after, info.name, info.revision)
        self._publish_marker(after)

    def _publish_marker(self, version: int) -> None:
        """On object storage, tell watching brokers the catalog moved: the ``_catalog.<version>`` marker
        in ``_system/brokers/`` (they list that folder every beat anyway; see :mod:`.system_objects`)."""
        if self._storage.is_local:
            return
        if self._marker is None:
            self._marker = VersionMarker(SystemObjects(self._storage), "catalog")
        self._marker.publish(version)

    def _txn_version(self, app_id: str) -> int:
        try:
            version = read_txn(self._dt, app_id)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot read the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        return 0 if version is None else int(version)

    def _open_or_create(self) -> DeltaTable:
        options = self._storage.options()
        try:
            if self._storage.is_table(self._uri):
                return DeltaTable(self._uri, storage_options=options)
            try:
                dt = DeltaTable.create(
                    self._uri,
                    CATALOG_SCHEMA,
                    mode="error",
                    name="topiclake_topics",
                    configuration=SYSTEM_TABLE_PROPERTIES,
                    storage_options=options,
                )
                logger.info("created topic catalog %s", self._uri)
                return dt
            except DeltaError as exc:
                # Another broker created it first: open theirs.
                logger.info("topic catalog %s created concurrently (%s); opening it", self._uri, exc)
                if not self._storage.is_table(self._uri):
                    raise
                return DeltaTable(self._uri, storage_options=options)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot open the topic catalog {self._uri}: {exc}", uri=self._uri) from exc

    def _update_snapshot(self) -> None:
        try:
            self._dt.update_incremental()
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot refresh the topic catalog {self._uri}: {exc}", uri=self._uri) from exc

    def _load_if_changed(self) -> None:
        if self._dt.version() != self._loaded_version:
            self._load()

    def _load(self) -> None:
        """Rebuild the state from the snapshot: the row with the highest revision per name."""
        try:
            version = self._dt.version()
            table = self._dt.to_pyarrow_table()
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot read the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        newest: dict[str, dict[str, Any]] = {}
        for record in table.to_pylist():
            name = record["name"]
            seen = newest.get(name)
            if seen is None or record["revision"] > seen["revision"]:
                newest[name] = record
        self._rows = {name: _from_record(record) for name, record in newest.items()}
        self._loaded_version = version
        logger.debug("loaded topic catalog %s at version %d: %d names", self._uri, version, len(newest))
