"""What a transaction takes in while it is open (split from :mod:`.coordinator`): the partitions and groups
it adds (AddPartitionsToTxn, AddOffsetsToTxn, or implicitly with transaction version 2), the offsets it
will commit (TxnOffsetCommit) and its Produce batches, each durable in ``_system/transactions`` before
the answer and held in memory until the transaction ends."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import pyarrow as pa

from topiclake.errors import InvalidTxnState
from topiclake.platform.broker import Broker
from topiclake.platform.transactions._ending import now_ms
from topiclake.platform.transactions._state import Txn, TxnState
from topiclake.platform.transactions._table import (
    Offsets,
    Row,
    TransactionTable,
    offsets_to_json,
    table_to_ipc,
)

TopicPartition = tuple[str, int]


class Joining:
    """The open transaction's requests of
    :class:`~topiclake.platform.transactions.coordinator.TransactionCoordinator` (it sets these
    attributes; the methods below are its other parts', declared for the type checker only, so none
    shadows them at run time)."""

    _broker: Broker
    _table: TransactionTable

    if TYPE_CHECKING:

        def _locked(self, transactional_id: str, *, wait: bool = False) -> AbstractContextManager[Txn]: ...

        def _check(self, txn: Txn, producer_id: int, epoch: int) -> None: ...

        def _begin(self, txn: Txn) -> None: ...

        def _check_room(self, nbytes: int) -> None: ...

        def _add_implicitly(
            self, txn: Txn, producer_id: int, epoch: int, key: TopicPartition
        ) -> list[Row]: ...

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
