"""Rebuild the coordinator's state from ``_system/transactions`` (a broker starts or takes over)."""

from __future__ import annotations

from topiclake.platform.transactions._state import Txn, TxnState
from topiclake.platform.transactions._table import Row, TransactionTable

DEFAULT_TIMEOUT_MS = 60_000


def replay(rows: list[Row], txns: dict[str, Txn], next_seq: dict[tuple[int, int, str, int], int]) -> None:
    """Fill ``txns`` (epochs, last transaction's state, decided commits to roll forward: state
    PrepareCommit with ``pending`` rows) and ``next_seq`` (the roll-forward sequence per producer, epoch
    and partition) from the table's rows."""
    prepared: dict[tuple[str, int], list[Row]] = {}
    completed: dict[tuple[str, int], str] = {}
    for r in sorted(rows, key=lambda r: (r.at_ms, r.producer_epoch)):
        tid = r.transactional_id
        seq = r.txn_seq or 0
        if r.kind == "epoch":
            txn = txns.setdefault(tid, Txn(tid, r.producer_id, r.producer_epoch, DEFAULT_TIMEOUT_MS))
            txn.producer_id, txn.epoch = r.producer_id, r.producer_epoch
            txn.timeout_ms = r.timeout_ms or txn.timeout_ms
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
    for (tid, seq), decided in prepared.items():
        if (tid, seq) in completed:
            continue
        first = decided[0]
        # an epoch row always comes first; setdefault only guards a table edited by hand
        known = txns.setdefault(tid, Txn(tid, first.producer_id, first.producer_epoch, DEFAULT_TIMEOUT_MS))
        known.state = TxnState.PREPARE_COMMIT
        known.txn_seq = seq
        known.pending = decided


def load_one(
    table: TransactionTable, transactional_id: str, next_seq: dict[tuple[int, int, str, int], int]
) -> Txn | None:
    """One transactional id as the table has it (with the records of a decided, unfinished commit)."""
    fresh: dict[str, Txn] = {}
    replay(table.rows_of(transactional_id), fresh, next_seq)
    loaded = fresh.get(transactional_id)
    if loaded is not None and loaded.state is TxnState.PREPARE_COMMIT:
        loaded.pending = table.records_of(transactional_id, loaded.txn_seq)
    return loaded
