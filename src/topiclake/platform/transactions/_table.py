"""The coordinator's log, the Delta table ``_system/transactions``: append-only, one commit per decision.

Rows by ``kind``:

- ``epoch``: InitProducerId gave ``transactional_id`` the producer id and epoch (fencing survives restarts).
- ``add_partitions`` (``topic``, ``partition``), ``add_offsets`` (``group_id``), ``txn_offsets``
  (``group_id``, the group's staged ``offsets`` so far as JSON) and ``staged`` (one Produce batch: ``topic``,
  ``partition``, the producer's ``base_sequence``, its ``records`` as an Arrow IPC stream): an open
  transaction (``txn_seq``), written before the request is answered, so a coordinator that takes the
  transactional id over carries the transaction on (docs/decisions.md, "Open transactions outlive their
  coordinator").
- ``prepare_commit``: the decision to commit a transaction, one row per partition (the producer sequence
  its records are appended under in ``base_sequence``, their count; the records are the transaction's
  ``staged`` rows, or, in tables written before those existed, this row's ``records``) and one row per
  consumer group (its offsets as JSON in ``offsets``), all in ONE Delta commit.
- ``complete_commit`` / ``complete_abort``: the transaction ended (after the roll-forward, for a commit).

SQL can read it like any other ``_system`` table.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from topiclake.errors import StorageError
from topiclake.platform.catalog.system_table import FOREIGN_ERRORS
from topiclake.platform.log.blind_append import append_file
from topiclake.platform.log.fast_append import LocalAppender
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.storage import Storage
from topiclake.platform.storage.s3_client import S3Client, s3_location
from topiclake.platform.transactions._group_commit import GroupCommit

logger = logging.getLogger(__name__)

NAME = "transactions"
#: How long the S3 writer trusts a version it confirmed not to be past a log cleanup (half an hour; the
#: table's log retention is delta-rs's default 30 days: cleanup never reaches a version that young).
OBJECT_FRESH_S = 1800.0

SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("transactional_id", pa.string(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int32(), nullable=False),
        pa.field("timeout_ms", pa.int32()),
        pa.field("txn_seq", pa.int64()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("base_sequence", pa.int32()),
        pa.field("record_count", pa.int64()),
        pa.field("records", pa.binary()),
        pa.field("group_id", pa.string()),
        pa.field("offsets", pa.string()),
        pa.field("at_ms", pa.int64(), nullable=False),
    ]
)

Offsets = dict[tuple[str, int], tuple[int, str | None]]


@dataclass
class Row:
    """One row of the table (the columns of :data:`SCHEMA`)."""

    kind: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    at_ms: int
    timeout_ms: int | None = None
    txn_seq: int | None = None
    topic: str | None = None
    partition: int | None = None
    base_sequence: int | None = None
    record_count: int | None = None
    records: bytes | None = None
    group_id: str | None = None
    offsets: str | None = None
    #: A decision's records in memory (not a column: the table's are in the ``staged`` rows), so a commit
    #: never encodes them (an IPC stream of ~60,000 records cost ~40 ms of EndTxn) only to decode them.
    table: pa.Table | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The row as the table's columns."""
        return {f.name: getattr(self, f.name) for f in SCHEMA}


def table_to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC stream bytes of a table (how staged records travel inside a decision row)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def ipc_to_table(data: bytes) -> pa.Table:
    """The table of :func:`table_to_ipc` bytes."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def offsets_to_json(offsets: Offsets) -> str:
    """A group's staged offsets as JSON (``[[topic, partition, offset, metadata], ...]``)."""
    return json.dumps([[t, p, o, m] for (t, p), (o, m) in sorted(offsets.items())])


def offsets_from_json(text: str) -> Offsets:
    """The inverse of :func:`offsets_to_json`."""
    return {(str(t), int(p)): (int(o), m) for t, p, o, m in json.loads(text)}


class TransactionTable:
    """``_system/transactions`` of a warehouse: blind appends (never conflict), read whole on recovery."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.uri = storage.system_uri(NAME)
        self._writer: DeltaTable | None = None  # kept open: a commit need not load the log again
        # once the table exists, commits bypass delta-rs (..log.blind_append): a link on a local
        # warehouse, a conditional PUT on S3 (other stores: delta-rs)
        self._fast: LocalAppender | ObjectAppender | None = None
        self._direct = True  # False: this store takes delta-rs's commits only
        self._group = GroupCommit[Row](self._write)
        # checkpoints are written beside the commits, not in them (~40-90 ms each under load, which stalled
        # every transactional Produce waiting for the group commit): one at a time, the newest asked for
        self._checkpoint_cond = threading.Condition()
        self._checkpoint_wanted: int | None = None
        self._checkpointer: threading.Thread | None = None

    def append(self, rows: Sequence[Row]) -> None:
        """Append rows in one Delta commit, shared with other threads' rows appended at the same time (the
        table is made by the first append).

        Raises:
            StorageError: The commit failed; nothing of it is in the table.
        """
        self._group.submit(rows)

    def _write(self, rows: list[Row]) -> None:
        data = pa.Table.from_pylist([r.as_dict() for r in rows], schema=SCHEMA)
        try:
            if self._fast is None and self._direct and self._storage.is_table(self.uri):
                self._fast = self._appender()
            if self._fast is not None:
                append_file(self._fast, data, self._version, self._checkpoint_later)
                return
            if self._writer is None and self._storage.is_table(self.uri):
                self._writer = DeltaTable(self.uri, storage_options=self._storage.options())
            if self._writer is None:
                write_deltalake(self.uri, data, mode="append", storage_options=self._storage.options())
            else:
                write_deltalake(self._writer, data, mode="append")
        except (*FOREIGN_ERRORS, RuntimeError) as exc:
            if isinstance(self._fast, ObjectAppender):
                self._fast.close()
            self._writer = self._fast = None  # read the table afresh next time
            raise StorageError(f"cannot append to {self.uri}: {exc}") from exc

    def _appender(self) -> LocalAppender | ObjectAppender | None:
        """The direct appender of the existing table: local, or S3 with static keys and a store that
        honours ``If-None-Match`` (the commit-safety probe); else None, and delta-rs commits from now on."""
        if self._storage.is_local:
            return LocalAppender(self.uri, self._version())
        location = s3_location(self._storage.root, self._storage.storage_options)
        if location is None or not self._storage.verify_commit_safety():
            self._direct = False
            return None
        return ObjectAppender(S3Client(location), f"_system/{NAME}", self._version(), OBJECT_FRESH_S)

    def _version(self) -> int:
        return DeltaTable(self.uri, storage_options=self._storage.options()).version()

    def _checkpoint_later(self, version: int) -> None:
        """Have the checkpoint of ``version`` written by the table's checkpoint thread (started on first
        use; a request made while one is written replaces any older one still waiting)."""
        with self._checkpoint_cond:
            self._checkpoint_wanted = version
            if self._checkpointer is None:
                self._checkpointer = threading.Thread(
                    target=self._checkpoints, name="txn-table-checkpoint", daemon=True
                )
                self._checkpointer.start()
            self._checkpoint_cond.notify_all()

    def _checkpoints(self) -> None:
        me = threading.current_thread()
        while True:
            with self._checkpoint_cond:
                while self._checkpoint_wanted is None and self._checkpointer is me:
                    self._checkpoint_cond.wait()
                version = self._checkpoint_wanted
                if version is None:
                    return  # closed, or replaced by a newer thread after a close
            self._checkpoint(version)
            with self._checkpoint_cond:
                if self._checkpoint_wanted == version:
                    self._checkpoint_wanted = None
                self._checkpoint_cond.notify_all()

    def close(self) -> None:
        """Write the checkpoint asked for last, if any, and stop the checkpoint thread (a later commit at
        a checkpoint version starts another)."""
        with self._checkpoint_cond:
            thread, self._checkpointer = self._checkpointer, None
            self._checkpoint_cond.notify_all()
        if thread is not None:
            thread.join()
        if isinstance(self._fast, ObjectAppender):
            self._fast.close()
            self._fast = None

    def _checkpoint(self, version: int) -> None:
        """A delta-rs checkpoint of ``version`` and the cleanup of log entries past the table's log
        retention (30 days), as delta-rs's post-commit hook does (after the commit: a failure is logged,
        the rows are in)."""
        try:
            dt = DeltaTable(self.uri, version=version, storage_options=self._storage.options())
            dt.create_checkpoint()
            dt.cleanup_metadata()
        except FOREIGN_ERRORS as exc:
            logger.warning("cannot checkpoint %s: %s", self.uri, exc)

    def rows(self, *, records: bool = False) -> list[Row]:
        """Every row, in no particular order (empty while there is no table); without the ``records``
        column unless asked (a restart reads the records of undecided rolls only: :meth:`records_of`).

        Raises:
            StorageError: The table cannot be read.
        """
        names = [n for n in SCHEMA.names if records or n != "records"]
        return self._read(names, None)

    def rows_of(self, transactional_id: str) -> list[Row]:
        """The rows of one transactional id, without records (a coordinator taking the id over)."""
        names = [n for n in SCHEMA.names if n != "records"]
        return self._read(names, pc.field("transactional_id") == transactional_id)

    def records_of(self, transactional_id: str, txn_seq: int, kind: str = "prepare_commit") -> list[Row]:
        """The rows of ``kind`` (``prepare_commit`` or ``staged``), with their records, of one transaction."""
        wanted = (
            (pc.field("kind") == kind)
            & (pc.field("transactional_id") == transactional_id)
            & (pc.field("txn_seq") == txn_seq)
        )
        return self._read(SCHEMA.names, wanted)

    def drop_records(self, before_ms: int) -> int:
        """Compaction: clear the ``records`` of ``prepare_commit`` and ``staged`` rows older than
        ``before_ms`` (the caller picks it below every open transaction and every commit not yet complete:
        only they read them).
        Returns the rows cleared. The rows stay: recovery needs their sequences and counts.

        Raises:
            StorageError: The rewrite failed (a conflict with another writer too; try again later).
        """
        predicate = (
            f"kind IN ('prepare_commit', 'staged') AND records IS NOT NULL AND at_ms < {int(before_ms)}"
        )
        try:
            if not self._storage.is_table(self.uri):
                return 0
            dt = DeltaTable(self.uri, storage_options=self._storage.options())
            metrics = dt.update(updates={"records": "NULL"}, predicate=predicate)
        except FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot compact {self.uri}: {exc}") from exc
        return int(metrics.get("num_updated_rows", 0))

    def _read(self, names: list[str], where: pc.Expression | None) -> list[Row]:
        try:
            if not self._storage.is_table(self.uri):
                return []
            dt = DeltaTable(self.uri, storage_options=self._storage.options())
            found = dt.to_pyarrow_dataset().to_table(columns=names, filter=where).to_pylist()
        except FOREIGN_ERRORS as exc:
            raise StorageError(f"cannot read {self.uri}: {exc}") from exc
        return [Row(**r) for r in found]
