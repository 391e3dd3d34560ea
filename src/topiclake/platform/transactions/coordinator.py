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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import pyarrow as pa

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
from topiclake.platform.transactions._rollforward import RollForward
from topiclake.platform.transactions._state import (
    Txn,
    TxnState,
    decision_rows,
    new_producer_id,
    next_epoch,
)
from topiclake.platform.transactions._table import (
    Offsets,
    Row,
    TransactionTable,
    offsets_to_json,
    table_to_ipc,
)
from topiclake.platform.transactions._takeover import Takeover
from topiclake.platform.transactions._tv2 import EpochBumpingEnd

logger = logging.getLogger(__name__)

#: Kafka's ``transaction.max.timeout.ms`` default (15 min).
MAX_TIMEOUT_MS = 900_000
#: What open transactions may hold in memory on one broker together (their records wait for the commit).
MAX_HELD_BYTES = 256 * 1024 * 1024

TopicPartition = tuple[str, int]


class TransactionCoordinator(Takeover, Housekeeping, EpochBumpingEnd):
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

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> None:
        """AddPartitionsToTxn: the partitions this transaction may produce to (topics must exist).

        Raises:
            InvalidProducerIdMapping, ProducerFenced, ConcurrentTransactions, TopicNotFound,
                PartitionNotFound.
        """
        wanted = list(partitions)
        for topic, partition in wanted:
            self._broker.log(topic).high_watermark(partition)  # unknown topic or partition: an error
        with self._locked(transactional_id) as txn:
            self._check(txn, producer_id, epoch)
            self._begin(txn)
            new = sorted(set(wanted) - txn.partitions)
            if new:  # durable before the answer: a successor coordinator knows the partitions
                now = now_ms()
                self._table.append([txn.row("add_partitions", now, topic=t, partition=p) for t, p in new])
            txn.partitions.update(new)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: this transaction will commit offsets of ``group_id``."""
        with self._locked(transactional_id) as txn:
            self._check(txn, producer_id, epoch)
            self._begin(txn)
            if group_id not in txn.groups:
                self._table.append([txn.row("add_offsets", now_ms(), group_id=group_id)])
            txn.groups.add(group_id)

    def stage_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Offsets,
        *,
        implicit: bool = False,
    ) -> None:
        """TxnOffsetCommit: offsets committed to the group when (and only if) the transaction commits.
        With ``implicit`` (TxnOffsetCommit v5, transaction version 2) the group joins the transaction here,
        its ``add_offsets`` row in the same commit as the offsets (and a transaction begins if none is open).

        Raises:
            InvalidTxnState: No transaction open, or the group was not added with AddOffsetsToTxn.
        """
        with self._locked(transactional_id) as txn:
            self._check(txn, producer_id, epoch)
            added = []
            if implicit and (txn.state is not TxnState.ONGOING or group_id not in txn.groups):
                self._begin(txn)
                added.append(txn.row("add_offsets", now_ms(), group_id=group_id))
                txn.groups.add(group_id)
            if txn.state is not TxnState.ONGOING or group_id not in txn.groups:
                raise InvalidTxnState(
                    f"group {group_id!r} is not part of an open transaction of {transactional_id!r}",
                    group=group_id,
                )
            merged = {**txn.offsets.get(group_id, {}), **offsets}
            row = txn.row("txn_offsets", now_ms(), group_id=group_id, offsets=offsets_to_json(merged))
            self._table.append([*added, row])
            txn.offsets[group_id] = merged

    def stage(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        base_sequence: int,
        records: pa.Table,
        *,
        implicit: bool = False,
    ) -> None:
        """A transactional Produce batch: held until the transaction ends (a retried batch is kept once).
        With ``implicit`` (Produce v12, transaction version 2) the partition joins the transaction here,
        its ``add_partitions`` row in the same commit as the batch (and a transaction begins if none is
        open).

        Raises:
            InvalidProducerIdMapping, ProducerFenced: Not the transactional id's current producer.
            InvalidTxnState: No transaction open, or the partition was not added to it.
            RecordTooLarge: Open transactions would hold more than ``max_held_bytes`` with this batch.
        """
        key = (topic, partition)
        records = self._broker.screen(topic, records)  # a record that cannot be appended fails now
        self._check_room(records.nbytes)
        with self._locked(transactional_id) as txn:
            added = self._add_implicitly(txn, producer_id, epoch, key) if implicit else []
            self._check_staging(txn, producer_id, epoch, key)
            if base_sequence in txn.staged.get(key, {}):
                return  # a retry of a batch already written and held
            seq = txn.txn_seq
            row = txn.row(
                "staged",
                now_ms(),
                topic=topic,
                partition=partition,
                base_sequence=base_sequence,
                record_count=records.num_rows,
                records=table_to_ipc(records),
            )
            txn.inflight += 1
        try:
            # durable before the answer, outside the lock: the producer's pipelined batches (and other
            # producers') share the table's group commit
            self._table.append([*added, row])
        finally:
            with txn.lock:
                txn.inflight -= 1
        with txn.lock:
            self._check_staging(txn, producer_id, epoch, key)
            if txn.txn_seq != seq:
                raise InvalidTxnState(
                    f"the transaction of {transactional_id!r} ended while its batch was written",
                    topic=topic,
                    partition=partition,
                )
            # in sequence order at commit, whatever order pipelined requests arrive in; a retry is kept once
            txn.hold(key, base_sequence, records)

    def _check_staging(self, txn: Txn, producer_id: int, epoch: int, key: TopicPartition) -> None:
        self._check(txn, producer_id, epoch)
        if txn.state is not TxnState.ONGOING or key not in txn.partitions:
            raise InvalidTxnState(
                f"{key[0]}/{key[1]} is not part of an open transaction of {txn.transactional_id!r}",
                topic=key[0],
                partition=key[1],
            )

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
