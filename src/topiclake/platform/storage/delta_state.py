"""Reading a Delta table's ``txn`` state from a snapshot that log cleanup may have outrun.

delta-rs keeps a snapshot's files in memory but reads its ``txn`` actions (application transactions: our
high watermarks, leader epochs and producer states) lazily, by replaying the log segment the snapshot was
built from. Once log cleanup has deleted those entries (a checkpoint past them, older than the log
retention), ``DeltaTable.transaction_version`` fails with "File not found: …/_delta_log/….json" on a
snapshot that is still perfectly usable otherwise. A long-running broker meets this on every busy topic.

:func:`read_txn` survives it: when the entries are gone it brings the snapshot to the newest version
(``update_incremental`` starts from the newest checkpoint) and reads again. A newer snapshot is the right
answer for every reader here: a ``txn`` version only grows, and a reader that must not see newer state
keeps its own handle (see :class:`StateReader`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

logger = logging.getLogger(__name__)

_ERRORS = (DeltaError, OSError, pa.ArrowException)


def log_entries_gone(exc: BaseException) -> bool:
    """Whether a delta-rs error says that log entries a snapshot would replay were cleaned up."""
    text = str(exc)
    return "not found" in text.lower() and "_delta_log" in text


def read_txn(dt: DeltaTable, app_id: str) -> int | None:
    """The ``txn`` version of ``app_id`` (None: never written), refreshing ``dt`` if cleanup outran it.

    Raises:
        DeltaError, OSError: The table cannot be read at all (not merely a cleaned-up snapshot).
    """
    try:
        return dt.transaction_version(app_id)
    except _ERRORS as exc:
        if not log_entries_gone(exc):
            raise
        logger.info("%s: snapshot %d outrun by log cleanup; refreshing", dt.table_uri, dt.version())
        dt.update_incremental()
        return dt.transaction_version(app_id)


class StateReader:
    """A private snapshot of a table for reading ``txn`` state, apart from a writer's own snapshot.

    A writer's snapshot must not move under it (its commit path reads its version), so readers on other
    threads read through this one instead when the writer's snapshot cannot answer. It is opened on first
    use, refreshed when log cleanup outran it, and not thread-safe: callers hold a lock.

    Args:
        open_table: Opens the table at its newest version.
    """

    def __init__(self, open_table: Callable[[], DeltaTable]) -> None:
        self._open = open_table
        self._dt: DeltaTable | None = None

    def txn(self, app_id: str, at_least: int = -1) -> int | None:
        """The ``txn`` version of ``app_id`` from a snapshot of version ``at_least`` or newer (refreshed
        when older, or when log cleanup outran it)."""
        if self._dt is None:
            self._dt = self._open()
        elif self._dt.version() < at_least:
            self._dt.update_incremental()
        return read_txn(self._dt, app_id)

    def refresh(self) -> None:
        """Move to the newest version on next use (the table changed in a way readers must see)."""
        self._dt = None


__all__ = ["StateReader", "log_entries_gone", "read_txn"]
