"""Rebuild the coordinator's state from ``_system/transactions`` (a broker starts or takes over)."""

from __future__ import annotations

import time
from collections.abc import Callable

from topiclake.platform.transactions._state import Txn, TxnState, staged_records, with_records
from topiclake.platform.transactions._table import Row, TransactionTable, offsets_from_json

DEFAULT_TIMEOUT_MS = 60_000

#: Rows of an open transaction, written before its requests are answered.
OPEN_KINDS = frozenset({"add_partitions", "add_offsets", "txn_offsets", "staged"})


def replay(rows: list[Row], txns: dict[str, Txn], next_seq: dict[tuple[int, int, str, int], int]) -> None:
    """Fill ``txns`` (epochs, last transaction's state, decided commits to roll forward: state
    PrepareCommit with ``pending`` rows; open transactions: state Ongoing with their partitions, groups and
    offsets, not their records) and ``next_seq`` (the roll-forward sequence per producer, epoch and
    partition) from the table's rows."""
    prepared: dict[tuple[str, int], list[Row]] = {}
    completed: dict[tuple[str, int], str] = {}
    opened: dict[tuple[str, int], list[Row]] = {}
    # an epoch row in the commit of a decision is an EndTxn v5's bump (transaction version 2)
    decided_at = {(r.transactional_id, r.txn_seq, r.at_ms) for r in rows if r.kind == "prepare_commit"}
    for r in sorted(rows, key=lambda r: (r.at_ms, r.producer_epoch)):
        tid = r.transactional_id
        seq = r.txn_seq or 0
        if r.kind == "epoch":
            txn = txns.setdefault(tid, Txn(tid, r.producer_id, r.producer_epoch, DEFAULT_TIMEOUT_MS))
            by_commit = (tid, r.txn_seq, r.at_ms) in decided_at
            txn.set_producer(r.producer_id, r.producer_epoch, TxnState.COMPLETE_COMMIT if by_commit else None)
            txn.timeout_ms = r.timeout_ms or txn.timeout_ms
        elif r.kind in OPEN_KINDS:
            opened.setdefault((tid, seq), []).append(r)
        elif r.kind == "prepare_commit":
            prepared.setdefault((tid, seq), []).append(r)
            if r.topic is not None and r.partition is not None:
                key = (r.producer_id, r.producer_epoch, r.topic, r.partition)
                end = (r.base_sequence or 0) + (r.record_count or 0)
                next_seq[key] = max(next_seq.get(key, 0), end)
        else:
            completed[(tid, seq)] = r.kind
        known = txns.get(tid)
        if known is not None:
            known.txn_seq = max(known.txn_seq, seq)
    for (tid, seq), kind in completed.items():
        known = txns.get(tid)
        if known is not None and seq == known.txn_seq:
            commit = kind == "complete_commit"
            known.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    for (tid, seq), parts in opened.items():
        known = txns.get(tid)
        if known is None or seq != known.txn_seq or (tid, seq) in completed or (tid, seq) in prepared:
            continue
        if any((r.producer_id, r.producer_epoch) != (known.producer_id, known.epoch) for r in parts):
            continue  # rows of an older instance (a table edited by hand): not this producer's
        _reopen(known, parts)
    for (tid, seq), decided in prepared.items():
        if (tid, seq) in completed:
            continue
        first = decided[0]
        # an epoch row always comes first; setdefault only guards a table edited by hand
        known = txns.setdefault(tid, Txn(tid, first.producer_id, first.producer_epoch, DEFAULT_TIMEOUT_MS))
        known.state = TxnState.PREPARE_COMMIT
        known.txn_seq = seq
        known.pending = decided


def _reopen(txn: Txn, rows: list[Row]) -> None:
    """``txn``'s open transaction as its rows (in time order) have it; its start is its first row's."""
    txn.clear()
    txn.state = TxnState.ONGOING
    txn.started_ms = min(r.at_ms for r in rows)
    for r in sorted(rows, key=lambda r: r.at_ms):
        if r.topic is not None and r.partition is not None:
            txn.partitions.add((r.topic, r.partition))
        if r.group_id is not None:
            txn.groups.add(r.group_id)
            if r.kind == "txn_offsets" and r.offsets is not None:
                txn.offsets.setdefault(r.group_id, {}).update(offsets_from_json(r.offsets))


def load_one(
    table: TransactionTable,
    transactional_id: str,
    next_seq: dict[tuple[int, int, str, int], int],
    clock: Callable[[], float],
) -> Txn | None:
    """One transactional id as the table has it: with the records of a decided, unfinished commit, or of
    its open transaction (whose timeout runs from its first row; ``clock``: the coordinator's monotonic
    seconds, read once the rows are, beside the wall clock: a read over object storage takes seconds, and
    taken before it they would age the transaction by that much, aborting it early)."""
    fresh: dict[str, Txn] = {}
    replay(table.rows_of(transactional_id), fresh, next_seq)
    loaded = fresh.get(transactional_id)
    if loaded is not None and loaded.state is TxnState.PREPARE_COMMIT:
        loaded.pending = decided_records(table, transactional_id, loaded.txn_seq)
    if loaded is not None and loaded.state is TxnState.ONGOING:
        staged = table.records_of(transactional_id, loaded.txn_seq, "staged")
        for key, batches in staged_records(staged).items():
            for sequence, records in batches.items():
                loaded.hold(key, sequence, records)
        mono, wall = clock(), time.time()
        loaded.started = mono - max(0.0, wall - loaded.started_ms / 1000)
    return loaded


def decided_records(table: TransactionTable, transactional_id: str, txn_seq: int) -> list[Row]:
    """A decided transaction's ``prepare_commit`` rows with their records (from its ``staged`` rows)."""
    decision = table.records_of(transactional_id, txn_seq)
    if all(r.records is not None or r.topic is None for r in decision):
        return decision
    return with_records(decision, table.records_of(transactional_id, txn_seq, "staged"))
