"""Transaction version 2 (KIP-890 part 2) in the coordinator (split from :mod:`.coordinator`): a
partition or group joins the transaction with its first batch or offsets (no AddPartitionsToTxn /
AddOffsetsToTxn), and EndTxn v5 bumps the producer epoch at every end, so a late request of an ended
transaction carries an epoch that is no longer current and is fenced instead of landing in the next one
(KAFKA-17754, the "delayed EndTxn commits the next transaction" class of bugs). Kafka's rules
(``TransactionCoordinator.endTransaction``): an EndTxn retried with the epoch just left behind succeeds again
with the current one, for the transaction that just ended the same way — only when that epoch came from an
EndTxn v5 (``Txn.end_bump``): a zombie fenced by InitProducerId or a timeout also holds the epoch below the
current one, and must stay fenced.
"""

from __future__ import annotations

from collections.abc import Callable

from topiclake.errors import InvalidProducerIdMapping, InvalidTxnState, ProducerFenced
from topiclake.platform.broker import Broker
from topiclake.platform.transactions._ending import abort, expire, now_ms
from topiclake.platform.transactions._state import MAX_EPOCH, Txn, TxnState
from topiclake.platform.transactions._table import Row, TransactionTable

TopicPartition = tuple[str, int]


class EpochBumpingEnd:
    """What :class:`~topiclake.platform.transactions.coordinator.TransactionCoordinator` does for clients of
    transaction version 2 (it sets these attributes)."""

    _broker: Broker
    _table: TransactionTable
    _clock: Callable[[], float]

    def _check(self, txn: Txn, producer_id: int, epoch: int) -> None:
        raise NotImplementedError

    def _begin(self, txn: Txn) -> None:
        raise NotImplementedError

    def _decide(self, txn: Txn, *, bump: bool = False) -> None:
        raise NotImplementedError

    def _finish_commit(self, txn: Txn) -> None:
        raise NotImplementedError

    def _add_implicitly(self, txn: Txn, producer_id: int, epoch: int, key: TopicPartition) -> list[Row]:
        """The partition of a batch joins the transaction (which begins if none is open); the
        ``add_partitions`` row to write with the batch. Caller holds ``txn.lock``.

        Raises:
            InvalidProducerIdMapping, ProducerFenced, ConcurrentTransactions, TopicNotFound,
                PartitionNotFound.
        """
        self._check(txn, producer_id, epoch)
        if txn.state is TxnState.ONGOING and key in txn.partitions:
            return []
        self._broker.log(key[0]).high_watermark(key[1])  # unknown topic or partition: an error
        self._begin(txn)
        txn.partitions.add(key)
        return [txn.row("add_partitions", now_ms(), topic=key[0], partition=key[1])]

    def _end_bumping(self, txn: Txn, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn v5: end the transaction and bump the epoch (in the Delta commit of the decision or the
        abort); an empty abort also bumps it. ``txn.producer_id``/``txn.epoch`` are then the answer.
        Caller holds ``txn.lock``.

        Raises:
            InvalidProducerIdMapping: Another producer id, and not a retry across a new one.
            ProducerFenced: Neither the current epoch nor a retry with the one just left behind.
            InvalidTxnState: The request does not fit the transaction's state (a commit of nothing, a
                commit of an aborted transaction, ...).
        """
        if txn.expired(self._clock()):
            expire(self._table, txn)  # not an EndTxn's bump: its producer is fenced, as in Kafka
        retry_bump = producer_id == txn.producer_id and epoch + 1 == txn.epoch
        retry_new_id = producer_id == txn.prev_producer_id and epoch == MAX_EPOCH - 1 and txn.epoch == 0
        # only across a bump of an EndTxn v5: the epoch a fenced zombie holds is one below too
        retry = (retry_bump or retry_new_id) and txn.end_bump is not None
        if producer_id != txn.producer_id and not retry_new_id:
            raise InvalidProducerIdMapping(
                f"transactional id {txn.transactional_id!r} is mapped to another producer id",
                transactional_id=txn.transactional_id,
                producer_id=producer_id,
            )
        state = txn.state
        current = producer_id == txn.producer_id and epoch == txn.epoch
        ended = state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        if not (retry if state is TxnState.PREPARE_COMMIT else current or (ended and retry)):
            raise ProducerFenced(
                f"producer epoch {epoch} of {txn.transactional_id!r} is not the current {txn.epoch}: fenced",
                transactional_id=txn.transactional_id,
                epoch=epoch,
                current_epoch=txn.epoch,
            )
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if retry and txn.end_bump is done and state in (TxnState.PREPARE_COMMIT, done):
            if state is TxnState.PREPARE_COMMIT and commit:
                self._finish_commit(txn)  # decided before a crash or a lost answer: finish it
                return
            if state is done:
                return  # the answer of the end that got through, again
        if state is TxnState.ONGOING and not retry:
            if commit:
                self._decide(txn, bump=True)
            else:
                abort(self._table, txn, "the producer aborted", bump=True, by_end=True)
            return
        if not commit and not retry and state is not TxnState.PREPARE_COMMIT:
            # an abort with nothing open (the producer's sends all failed): Kafka bumps the epoch too
            self._begin(txn)
            abort(self._table, txn, "the producer aborted an empty transaction", bump=True, by_end=True)
            return
        raise InvalidTxnState(
            f"{txn.transactional_id!r} cannot {'commit' if commit else 'abort'} in state {state.value}"
            f"{' (a retry)' if retry else ''}",
            transactional_id=txn.transactional_id,
        )
