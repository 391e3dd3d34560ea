"""The state of one transactional id (what the coordinator keeps in memory per id)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import pyarrow as pa

from topiclake.platform.transactions._table import (
    Offsets,
    Row,
    ipc_to_table,
    offsets_from_json,
    offsets_to_json,
)

MAX_EPOCH = 32767

TopicPartition = tuple[str, int]


def new_producer_id() -> int:
    """A fresh producer id (random 62 bits, like the idempotent producers' ids)."""
    return random.getrandbits(62)


def next_epoch(producer_id: int, epoch: int) -> tuple[int, int]:
    """The (producer id, epoch) after a bump: a new id at epoch 0 once the epoch would overflow."""
    if epoch + 1 >= MAX_EPOCH:
        return new_producer_id(), 0
    return producer_id, epoch + 1


class TxnState(StrEnum):
    """Kafka's transaction states (the ones a client can observe)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


@dataclass
class Txn:
    """One transactional id: its producer, its current (or last) transaction and what that staged."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    txn_seq: int = 0
    started: float = 0.0  # monotonic seconds, for the timeout
    started_ms: int = -1  # wall-clock ms, for DescribeTransactions
    partitions: set[TopicPartition] = field(default_factory=set)
    # per partition: the held batches by their producer sequence (a retried batch replaces itself)
    staged: dict[TopicPartition, dict[int, pa.Table]] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, Offsets] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[Row] = field(default_factory=list)  # a decided commit not rolled forward yet
    held_bytes: int = 0  # of the staged records (Arrow buffers), for the coordinator's memory bound
    # read from the table before this broker coordinated the id (at start, or before the brokers changed):
    # another broker may have coordinated it since, so the next request reads the id's rows again
    stale: bool = False
    inflight: int = 0  # Produce batches being written to the table (a commit waits for them)
    replaced: bool = False  # by a newer state read from the table: requests use that one
    # the producer id before the last epoch bump gave a new one (an EndTxn v5 retried across it succeeds)
    prev_producer_id: int = -1
    # how the transaction ended whose EndTxn v5 gave the current epoch (None: the epoch came otherwise, by
    # InitProducerId or a timeout): only then is an EndTxn with the epoch before a retry to answer again
    end_bump: TxnState | None = None

    def set_producer(self, producer_id: int, epoch: int, end_bump: TxnState | None = None) -> None:
        """Take the producer id and epoch of an ``epoch`` row (remembering the previous id); ``end_bump``:
        the end of the transaction whose EndTxn v5 bumped the epoch, if that is where it comes from."""
        if producer_id != self.producer_id:
            self.prev_producer_id = self.producer_id
        self.producer_id, self.epoch = producer_id, epoch
        self.end_bump = end_bump

    def row(self, kind: str, now: int, **fields: Any) -> Row:
        """A row of ``kind`` for this id's current producer and transaction."""
        head = (self.transactional_id, self.producer_id, self.epoch, now, self.timeout_ms, self.txn_seq)
        return Row(kind, *head, **fields)

    def hold(self, key: TopicPartition, base_sequence: int, records: pa.Table) -> None:
        """Stage a batch (a retry replaces itself). Caller holds ``lock``."""
        batches = self.staged.setdefault(key, {})
        old = batches.get(base_sequence)
        self.held_bytes += records.nbytes - (old.nbytes if old is not None else 0)
        batches[base_sequence] = records

    def expired(self, now: float) -> bool:
        """Whether the open transaction has outlived its timeout (``now``: monotonic seconds). It can no
        longer commit: its next request, or the sweep, aborts it."""
        return self.state is TxnState.ONGOING and now - self.started > self.timeout_ms / 1000

    def pending_offsets(self, group_id: str, now: float) -> set[TopicPartition]:
        """Partitions of ``group_id`` whose offsets this id's open or deciding transaction holds (an
        expired transaction's never commit, so they are not pending, whether or not the sweep ran yet)."""
        if self.state is TxnState.ONGOING:
            return set() if self.expired(now) else set(self.offsets.get(group_id, {}))
        if self.state is TxnState.PREPARE_COMMIT:
            return {
                tp
                for row in self.pending
                if row.group_id == group_id and row.offsets is not None
                for tp in offsets_from_json(row.offsets)
            }
        return set()

    def summary(self) -> TxnSummary:
        """What DescribeTransactions shows of this id."""
        ongoing = self.state is TxnState.ONGOING
        return TxnSummary(
            self.transactional_id,
            self.producer_id,
            self.epoch,
            self.state,
            self.timeout_ms,
            tuple(sorted(self.partitions)),
            self.started_ms if ongoing else -1,
        )

    def clear(self) -> None:
        """Forget what the transaction staged (it ended)."""
        self.partitions.clear()
        self.staged.clear()
        self.held_bytes = 0
        self.groups.clear()
        self.offsets.clear()


@dataclass(frozen=True)
class TxnSummary:
    """What DescribeTransactions-like views show of a transactional id."""

    transactional_id: str
    producer_id: int
    epoch: int
    state: TxnState
    timeout_ms: int
    partitions: tuple[TopicPartition, ...]
    started_ms: int


def decision_rows(txn: Txn, next_seq: dict[tuple[int, int, str, int], int], now: int) -> list[Row]:
    """The ``prepare_commit`` rows of a transaction: each partition's records (under the next sequence of
    ``next_seq``; the table gets the rows without them, as its ``staged`` rows hold them) and each group's
    offsets; one row without either for a transaction of nothing."""

    def row(**fields: Any) -> Row:
        return txn.row("prepare_commit", now, **fields)

    rows = []
    for (topic, partition), batches in sorted(txn.staged.items()):
        data = pa.concat_tables([batches[s] for s in sorted(batches)], promote_options="default")
        base = next_seq.get((txn.producer_id, txn.epoch, topic, partition), 0)
        rows.append(
            row(
                topic=topic,
                partition=partition,
                base_sequence=base,
                record_count=data.num_rows,
                table=data,
            )
        )
    for group_id, offsets in sorted(txn.offsets.items()):
        rows.append(row(group_id=group_id, offsets=offsets_to_json(offsets)))
    if not rows:  # a commit of nothing still ends the transaction in the table
        rows.append(row())
    return rows


def staged_records(rows: list[Row]) -> dict[TopicPartition, dict[int, pa.Table]]:
    """The batches of ``staged`` rows by partition and producer sequence (a batch written twice, by a
    retry, is kept once)."""
    out: dict[TopicPartition, dict[int, pa.Table]] = {}
    for r in sorted(rows, key=lambda r: r.at_ms):
        if r.topic is not None and r.partition is not None and r.records is not None:
            out.setdefault((r.topic, r.partition), {})[r.base_sequence or 0] = ipc_to_table(r.records)
    return out


def with_records(decision: list[Row], staged: list[Row]) -> list[Row]:
    """The decision's partition rows with their records filled in from the transaction's ``staged`` rows
    (rows that carry records already, written before staged rows existed, are kept as they are)."""
    batches = staged_records(staged)
    out = []
    for r in decision:
        key = (r.topic, r.partition)
        if r.records is None and r.topic is not None and r.partition is not None and key in batches:
            parts = batches[(r.topic, r.partition)]
            data = pa.concat_tables([parts[s] for s in sorted(parts)], promote_options="default")
            r = replace(r, table=data)
        out.append(r)
    return out
