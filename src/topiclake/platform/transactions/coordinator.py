"""The transaction coordinator: Kafka's transaction state machine over the logs and ``_system/transactions``.

A transaction's records are held by the coordinator (staged, in memory) until it ends; they get their
offsets when the transaction commits, so a topic's Delta table only ever holds committed records and its
offsets stay contiguous (no reserved ranges, no holes, no aborted rows; docs/decisions.md says why). A
commit goes in three steps:

1. the decision: one Delta commit to ``_system/transactions`` holding every partition's records and every
   group's offsets (:mod:`._table`); the transaction is committed from here on, whatever crashes;
2. the roll-forward: each partition's records appended as one request of an idempotent producer (the
   transaction's producer id and epoch, a sequence the coordinator numbers per partition), so the Delta
   ``txn`` action the log commits with them makes a replay after a crash a duplicate that writes nothing;
   then the groups' offsets;
3. ``complete_commit`` recorded.

A broker that starts (or takes a coordinator's place) rolls forward every decided transaction not marked
complete. An abort drops the staged records: nothing of it was ever in a topic table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from topiclake.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
)
from topiclake.platform.broker import Broker
from topiclake.platform.records import ProducerInfo
from topiclake.platform.transactions._ending import abort, bumped, expire, now_ms
from topiclake.platform.transactions._housekeeping import Housekeeping
from topiclake.platform.transactions._joining import Joining
from topiclake.platform.transactions._rollforward import RollForward
from topiclake.platform.transactions._state import (
    Txn,
    TxnState,
    decision_rows,
    new_producer_id,
    next_epoch,
)
from topiclake.platform.transactions._table import (
    Row,
    TransactionTable,
)
from topiclake.platform.transactions._takeover import Takeover
from topiclake.platform.transactions._tv2 import EpochBumpingEnd

logger = logging.getLogger(__name__)

#: Kafka's ``transaction.max.timeout.ms`` default (15 min).
MAX_TIMEOUT_MS = 900_000
#: What open transactions may hold in memory on one broker together (their records wait for the commit).
MAX_HELD_BYTES = 256 * 1024 * 1024

TopicPartition = tuple[str, int]


class TransactionCoordinator(Takeover, Housekeeping, EpochBumpingEnd, Joining):
    """Transactions of this broker's transactional ids.

    Args:
        broker: The broker whose logs and groups the transactions write to.
        max_timeout_ms: Kafka's ``transaction.max.timeout.ms``.
        max_held_bytes: What open transactions may hold together; a batch beyond it is refused.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        broker: Broker,
        *,
        max_timeout_ms: int = MAX_TIMEOUT_MS,
        max_held_bytes: int = MAX_HELD_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._broker = broker
        self._table = TransactionTable(broker.storage)
        self._max_timeout_ms = max_timeout_ms
        self._max_held_bytes = max_held_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._txns: dict[str, Txn] = {}
        self._next_seq: dict[tuple[int, int, str, int], int] = {}
        self._recovered = False
        self._roll = RollForward(broker, self._table)

    # ------------------------------------------------------------------ recovery

    def _get(self, transactional_id: str) -> Txn:
        self.recover()
        with self._lock:
            txn = self._txns.get(transactional_id)
        if txn is None or txn.stale:
            self._reload(transactional_id)
            with self._lock:
                txn = self._txns.get(transactional_id)
        if txn is None:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} has no producer id: call InitProducerId first",
                transactional_id=transactional_id,
            )
        return txn

    def _check(self, txn: Txn, producer_id: int, epoch: int) -> None:
        """The request is of ``txn``'s current producer (a transaction past its timeout is aborted and its
        producer fenced here, as the sweep would a moment later). Caller holds ``txn.lock``."""
        if txn.expired(self._clock()):
            expire(self._table, txn)
        if producer_id != txn.producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {txn.transactional_id!r} is mapped to another producer id",
                transactional_id=txn.transactional_id,
                producer_id=producer_id,
            )
        if epoch != txn.epoch:
            raise ProducerFenced(
                f"producer epoch {epoch} of {txn.transactional_id!r} is not the current {txn.epoch}: fenced",
                transactional_id=txn.transactional_id,
                epoch=epoch,
                current_epoch=txn.epoch,
            )

    # ------------------------------------------------------------------ producer ids

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> ProducerInfo:
        """InitProducerId of a transactional producer: fence older instances, abort their open transaction.

        Raises:
            InvalidTransactionTimeout: ``timeout_ms`` outside 1 .. ``transaction.max.timeout.ms``.
            ProducerFenced: ``producer_id``/``epoch`` name an instance older than the current one's last.
            StorageError: The new epoch could not be recorded.
        """
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction timeout {timeout_ms} ms is not within 1..{self._max_timeout_ms}",
                timeout_ms=timeout_ms,
            )
        self.recover()
        self._reload(transactional_id)
        with self._lock:
            if transactional_id not in self._txns:
                self._txns[transactional_id] = Txn(transactional_id, new_producer_id(), -1, timeout_ms)
        with self._locked(transactional_id) as txn:
            if txn.state is TxnState.PREPARE_COMMIT:
                self._finish_commit(txn)
            if producer_id >= 0 and (producer_id != txn.producer_id or epoch < txn.epoch - 1):
                raise ProducerFenced(
                    f"producer {producer_id} epoch {epoch} is not the current one of {transactional_id!r}",
                    transactional_id=transactional_id,
                )
            if txn.state is TxnState.ONGOING:
                abort(self._table, txn, "a new instance initialized")
            pid, new_epoch = next_epoch(txn.producer_id, txn.epoch)
            self._table.append(
                [Row("epoch", transactional_id, pid, new_epoch, now_ms(), timeout_ms, txn.txn_seq)]
            )
            txn.set_producer(pid, new_epoch)
            txn.timeout_ms = timeout_ms
            logger.info("transactions: %s is producer %d epoch %d", transactional_id, pid, new_epoch)
            return ProducerInfo(pid, new_epoch, 0)

    # ------------------------------------------------------------------ a transaction's parts

    def _begin(self, txn: Txn) -> None:
        if txn.state is TxnState.PREPARE_COMMIT:
            raise ConcurrentTransactions(
                f"the previous transaction of {txn.transactional_id!r} is still being committed"
            )
        if txn.state is not TxnState.ONGOING:
            txn.clear()
            txn.state = TxnState.ONGOING
            txn.txn_seq += 1
            txn.started = self._clock()
            txn.started_ms = now_ms()

    # ------------------------------------------------------------------ the end

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *, bump: bool = False
    ) -> tuple[int, int]:
        """EndTxn: commit (decide, roll forward, complete) or abort (drop what was staged); the producer id
        and epoch the producer goes on with.

        A retried EndTxn of the transaction that just ended the same way succeeds again. With ``bump``
        (EndTxn v5, transaction version 2) every end bumps the epoch (:mod:`._tv2`).

        Raises:
            InvalidProducerIdMapping, ProducerFenced, InvalidTxnState, StorageError, and what the
                roll-forward's appends raise (the decision stands; the next call or sweep retries).
        """
        with self._locked(transactional_id, wait=commit) as txn:
            if bump:
                self._end_bumping(txn, producer_id, epoch, commit)
                return txn.producer_id, txn.epoch
            self._check(txn, producer_id, epoch)
            if txn.state is TxnState.PREPARE_COMMIT and commit:
                self._finish_commit(txn)
                return txn.producer_id, txn.epoch
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if txn.state is done:
                return txn.producer_id, txn.epoch
            if txn.state is not TxnState.ONGOING:
                raise InvalidTxnState(
                    f"{transactional_id!r} has no open transaction to {'commit' if commit else 'abort'} "
                    f"(state {txn.state.value})",
                    transactional_id=transactional_id,
                )
            if not commit:
                abort(self._table, txn, "the producer aborted")
            else:
                self._decide(txn)
            return txn.producer_id, txn.epoch

    def _decide(self, txn: Txn, *, bump: bool = False) -> None:
        """Commit ``txn``'s open transaction: the decision (with ``bump``, the next epoch in the same Delta
        commit; the records keep the epoch they were produced under), then the roll-forward. Caller holds
        ``txn.lock``."""
        now = now_ms()
        decision = decision_rows(txn, self._next_seq, now)
        epoch_rows = [bumped(txn, now)] if bump else []
        # from here on the transaction is committed (its records are in its staged rows)
        self._table.append([*(replace(r, records=None) for r in decision), *epoch_rows])
        for row in decision:
            if row.topic is not None and row.partition is not None:
                key = (row.producer_id, row.producer_epoch, row.topic, row.partition)
                self._next_seq[key] = (row.base_sequence or 0) + (row.record_count or 0)
        for row in epoch_rows:
            txn.set_producer(row.producer_id, row.producer_epoch, TxnState.COMPLETE_COMMIT)
        txn.pending = decision
        txn.state = TxnState.PREPARE_COMMIT
        txn.clear()
        self._finish_commit(txn)

    @contextmanager
    def _locked(self, transactional_id: str, *, wait: bool = False) -> Iterator[Txn]:
        """The id's state, its lock held (and, with ``wait``, once no Produce batch of it is being
        written: a commit must hold all of them; 10 s at most, then CONCURRENT_TRANSACTIONS, which a client
        retries). Never a state another thread has just replaced with the table's."""
        deadline = time.monotonic() + 10
        while True:
            txn = self._get(transactional_id)
            txn.lock.acquire()
            if not txn.replaced and (not wait or not txn.inflight):
                break
            txn.lock.release()
            if time.monotonic() > deadline:
                raise ConcurrentTransactions(f"batches of {txn.transactional_id!r} are still being written")
            if not txn.replaced:
                time.sleep(0.002)
        try:
            yield txn
        finally:
            txn.lock.release()

    def _finish_commit(self, txn: Txn) -> None:
        """Roll a decided commit forward (idempotent) and record it complete. Caller holds ``txn.lock``."""
        self._roll.run(txn)
        txn.pending = []
        txn.state = TxnState.COMPLETE_COMMIT
        logger.info("transactions: %s #%d committed", txn.transactional_id, txn.txn_seq)

    def close(self) -> None:
        """Release the roll-forward threads (a roll-forward in progress finishes) and the table's
        checkpoint thread (a checkpoint asked for is written first)."""
        self._roll.close()
        self._table.close()
