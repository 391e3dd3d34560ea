"""A small Delta table in ``_system/`` that is read whole and replaced whole in one commit.

The cluster's state (``_system/partition_state``) and the ACLs (``_system/acls``) are such tables: a few
rows, each change a full overwrite fenced by a Delta ``txn`` action, older versions kept for time travel.
This class holds what they share: opening the table lazily, refreshing its version, reading its rows and
writing a new version, with delta-rs and pyarrow errors turned into :class:`~topiclake.errors.StorageError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import StorageError
from topiclake.platform.storage import Storage

#: What delta-rs and pyarrow raise at this seam.
FOREIGN_ERRORS = (DeltaError, OSError, pa.ArrowException)


class SmallSystemTable:
    """One small ``_system/<name>`` table, opened lazily.

    Args:
        storage: The warehouse.
        name: The table's name under ``_system/``.
        properties: Delta table properties set when the table is created.
    """

    def __init__(self, storage: Storage, name: str, properties: Mapping[str, str]) -> None:
        self._storage = storage
        self.uri = storage.system_uri(name)
        self._properties = dict(properties)
        self._dt: DeltaTable | None = None

    def _table(self) -> DeltaTable | None:
        """The open table, or None while it does not exist."""
        if self._dt is None:
            try:
                if not self._storage.is_table(self.uri):
                    return None
                self._dt = DeltaTable(self.uri, storage_options=self._storage.options())
            except FOREIGN_ERRORS as exc:
                raise StorageError(f"cannot open {self.uri}: {exc}") from exc
        return self._dt

    def forget(self) -> None:
        """Reopen the table next time (after a failed write the snapshot may be behind)."""
        self._dt = None

    def version(self) -> int:
        """The table's newest version (-1 while it does not exist): one log listing, no data read."""
        dt = self._table()
        if dt is None:
            return -1
        try:
            dt.update_incremental()
        except FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot refresh {self.uri}: {exc}") from exc
        return dt.version()

    def rows(self) -> list[dict[str, Any]]:
        """Every row of the version last refreshed (empty while the table does not exist)."""
        dt = self._table()
        if dt is None:
            return []
        try:
            rows: list[dict[str, Any]] = dt.to_pyarrow_table().to_pylist()
        except FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot read {self.uri}: {exc}") from exc
        return rows

    def create(self, data: pa.Table, props: CommitProperties) -> None:
        """Write the table's first version (fails when another writer created it first).

        Raises:
            DeltaError, OSError, pyarrow.ArrowException: as delta-rs raises them; the caller decides.
        """
        write_deltalake(
            self.uri,
            data,
            mode="error",
            configuration=self._properties,
            storage_options=self._storage.options(),
            commit_properties=props,
        )
        self._dt = None
