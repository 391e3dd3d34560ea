"""The transaction coordinator's housekeeping and views (split from :mod:`.coordinator`): the timeout
sweep, the memory bound on held records, an administrator's abort, pending offsets and descriptions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from topiclake.errors import RecordTooLarge
from topiclake.platform.transactions._ending import expire, now_ms
from topiclake.platform.transactions._state import Txn, TxnState, TxnSummary
from topiclake.platform.transactions._table import TransactionTable

logger = logging.getLogger("topiclake.platform.transactions.coordinator")

TopicPartition = tuple[str, int]

#: How long a committed transaction's records stay in ``_system/transactions`` (well above any clock skew
#: between brokers: a decision another broker is rolling forward right now is never cleared).
COMPACT_KEEP_MS = 3_600_000


class Housekeeping:
    """What :class:`~topiclake.platform.transactions.coordinator.TransactionCoordinator` does besides a
    transaction's own requests (it sets these attributes)."""

    _lock: threading.Lock
    _txns: dict[str, Txn]
    _table: TransactionTable
    _clock: Callable[[], float]
    _max_held_bytes: int
    _max_timeout_ms: int

    def recover(self) -> None:
        raise NotImplementedError

    def _finish_commit(self, txn: Txn) -> None:
        raise NotImplementedError

    def abort_expired(self, owns: Callable[[str], bool] | None = None) -> list[str]:
        """Abort open transactions older than their timeout and bump their epoch (the sweep; Kafka's 10 s).

        Also retries the roll-forward of decided commits a failed EndTxn left behind. Returns the
        transactional ids aborted.

        Args:
            owns: Whether this broker coordinates an id now (in a cluster): an id it does not is never
                aborted here. A broker that served an id while the brokers disagreed on who is alive keeps
                its state, not marked stale (the change came before); its sweep must not abort, and fence,
                the transaction the id's coordinator carries on meanwhile.
        """
        self.recover()
        now = self._clock()
        aborted = []
        with self._lock:
            txns = list(self._txns.values())
        for txn in txns:
            if txn.stale or not txn.lock.acquire(blocking=False):
                continue  # stale: perhaps another broker's now (its next request reads it again)
            try:
                if txn.state is TxnState.PREPARE_COMMIT:
                    self._finish_commit(txn)
                elif owns is not None and not owns(txn.transactional_id):
                    txn.stale = True  # another broker's: read again should the id come back here
                elif txn.expired(now):
                    expire(self._table, txn)
                    aborted.append(txn.transactional_id)
            except Exception:  # the sweep goes on with the other transactions; this one is tried again
                logger.exception("transactions: sweep of %s failed", txn.transactional_id)
            finally:
                txn.lock.release()
        return aborted

    def _check_room(self, nbytes: int) -> None:
        with self._lock:
            txns = list(self._txns.values())
        held = sum(t.held_bytes for t in txns)
        if held + nbytes > self._max_held_bytes:
            raise RecordTooLarge(
                f"open transactions on this broker hold {held} bytes; {nbytes} more would pass the limit of "
                f"{self._max_held_bytes} (records wait in memory until their commit): commit in smaller "
                "transactions",
                held_bytes=held,
                limit=self._max_held_bytes,
            )

    def compact(self, keep_ms: int = COMPACT_KEEP_MS) -> int:
        """Clear the records of ended transactions older than ``keep_ms`` from ``_system/transactions``
        (the records are the table's bulk; every row stays, as recovery needs it). Returns rows cleared.

        Raises:
            StorageError: The table could not be read or rewritten (try again later).
        """
        rows = self._table.rows()
        now = now_ms()
        ended = {(r.transactional_id, r.txn_seq) for r in rows if r.kind.startswith("complete_")}
        decided = {(r.transactional_id, r.txn_seq) for r in rows if r.kind == "prepare_commit"}
        first: dict[tuple[str, int | None], int] = {}
        for r in rows:
            if r.kind == "epoch":
                continue
            key = (r.transactional_id, r.txn_seq)
            first[key] = min(first.get(key, r.at_ms), r.at_ms)
        # a commit decided and not complete needs its records; so may a transaction still open (one open
        # longer than the maximum timeout can only be aborted)
        needed = [
            at
            for key, at in first.items()
            if key not in ended and (key in decided or at > now - self._max_timeout_ms)
        ]
        before = min([now - keep_ms, *needed])
        cleared = self._table.drop_records(before)
        if cleared:
            logger.info("transactions: compacted %d decided rows of %s", cleared, self._table.uri)
        return cleared

    def abort_marker(self, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]) -> bool:
        """WriteTxnMarkers(abort) from an administrator (``kafka-transactions.sh abort``): abort the open
        transaction of ``producer_id`` at ``epoch`` holding any of ``partitions`` (the whole transaction: its
        records are held together) and fence its producer. False when this coordinator holds none."""
        wanted = set(partitions)
        with self._lock:
            txns = [t for t in self._txns.values() if t.producer_id == producer_id and not t.stale]
        for txn in txns:
            with txn.lock:
                if txn.state is TxnState.ONGOING and txn.epoch == epoch and txn.partitions & wanted:
                    expire(self._table, txn, "aborted by an administrator's WriteTxnMarkers")
                    return True
        return False

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with offsets in an open or deciding transaction (require_stable)."""
        with self._lock:
            txns = [t for t in self._txns.values() if not t.stale]
        now = self._clock()
        return {tp for txn in txns for tp in txn.pending_offsets(group_id, now)}

    def describe(self) -> list[TxnSummary]:
        """Every transactional id this coordinator knows, by id (in a cluster, also ids read before the
        brokers changed, which another broker may coordinate now: the Kafka layer lists only its own)."""
        with self._lock:
            txns = sorted(self._txns.values(), key=lambda t: t.transactional_id)
        return [t.summary() for t in txns]
