"""How a coordinator learns the transactional ids it coordinates (split from :mod:`.coordinator`): the
table read once at start, and an id read again after the live brokers changed (it may have moved here, with
an open transaction to carry on: docs/decisions.md, "Open transactions outlive their coordinator")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from topiclake.platform.transactions._recovery import decided_records, load_one, replay
from topiclake.platform.transactions._state import Txn, TxnState
from topiclake.platform.transactions._table import TransactionTable

logger = logging.getLogger("topiclake.platform.transactions.coordinator")


class Takeover:
    """What :class:`~topiclake.platform.transactions.coordinator.TransactionCoordinator` reads of
    ``_system/transactions`` (it sets these attributes)."""

    _lock: threading.Lock
    _txns: dict[str, Txn]
    _table: TransactionTable
    _clock: Callable[[], float]
    _next_seq: dict[tuple[int, int, str, int], int]
    _recovered: bool

    def _finish_commit(self, txn: Txn) -> None:
        raise NotImplementedError

    def recover(self) -> None:
        """Load the table once: epochs, sequence numbers, and roll forward decided, incomplete commits.

        Every other id is marked stale: it is read again on its next request (this broker may not be its
        coordinator, or another broker may have coordinated it since the rows were read).
        """
        with self._lock:
            if self._recovered:
                return
            replay(self._table.rows(), self._txns, self._next_seq)
            self._recovered = True
            for txn in self._txns.values():
                txn.stale = txn.state is not TxnState.PREPARE_COMMIT
        for txn in list(self._txns.values()):
            if txn.state is TxnState.PREPARE_COMMIT:
                with txn.lock:
                    txn.pending = decided_records(self._table, txn.transactional_id, txn.txn_seq)
                    logger.info("transactions: rolling forward %s #%d", txn.transactional_id, txn.txn_seq)
                    self._finish_commit(txn)

    def brokers_changed(self) -> None:
        """The live brokers changed: transactional ids may have moved to or from this broker, so what it
        remembers of each is read again from the table on the id's next request (an id it takes over
        continues where its last coordinator left it: epoch, open transaction, staged records)."""
        with self._lock:
            txns = list(self._txns.values())
        for txn in txns:
            if txn.state is not TxnState.PREPARE_COMMIT:
                txn.stale = True

    def _reload(self, transactional_id: str) -> None:
        """Read one id's rows again: in a cluster another broker may have coordinated it since (a newer
        epoch in the table fences what this broker remembers, an open transaction carries on), or decided a
        commit it did not finish."""
        with self._lock:
            current = self._txns.get(transactional_id)
        if current is None:
            loaded = load_one(self._table, transactional_id, self._next_seq, self._clock)
            if loaded is None:
                return
            with self._lock:
                if self._txns.setdefault(transactional_id, loaded) is not loaded:
                    return
        else:
            # under the remembered state's lock: no request works on it while it is replaced
            if not current.lock.acquire(blocking=False):
                return  # this broker is coordinating the id right now
            try:
                if current.inflight:
                    return
                loaded = load_one(self._table, transactional_id, self._next_seq, self._clock)
                if loaded is None:
                    return
                newest = (current.producer_id, current.epoch) == (loaded.producer_id, loaded.epoch)
                if not current.stale and newest:
                    return  # what this broker knows is the newest
                with self._lock:
                    self._txns[transactional_id] = loaded
                current.replaced = True
            finally:
                current.lock.release()
        logger.info(
            "transactions: %s taken over at epoch %d (%s)", transactional_id, loaded.epoch, loaded.state.value
        )
