"""The offsets store's Delta side: the flusher that appends queued commits as one fenced Delta commit, the
rewrite that compacts superseded rows, vacuum, and loading the newest rows from the table. Split from
:mod:`.offsets_store`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from topiclake.errors import CommitConflict, StorageError, TopiclakeError
from topiclake.platform.groups._offsets_base import (
    _FOREIGN,
    _VACUUM_EVERY_S,
    OFFSETS_APP_ID,
    CommittedOffset,
    OffsetsBase,
    _Key,
    _Pending,
    _record,
)
from topiclake.schemas.offsets import OFFSETS_SCHEMA, OFFSETS_TABLE_PROPERTIES

logger = logging.getLogger("topiclake.platform.groups.offsets_store")  # one logger for all parts


class OffsetsTable(OffsetsBase):
    """Writing and reading the offsets table."""

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
