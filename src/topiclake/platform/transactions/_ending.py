"""How an open transaction ends without a commit: the abort row, and the epoch bump that fences its
producer after a timeout (shared by the producer's abort, a new instance's InitProducerId, the sweep and a
late request of a transaction whose timeout has passed)."""

from __future__ import annotations

import logging
import time

from topiclake.platform.transactions._state import Txn, TxnState, next_epoch
from topiclake.platform.transactions._table import Row, TransactionTable

logger = logging.getLogger(__name__)


def now_ms() -> int:
    """Wall-clock milliseconds (the table's ``at_ms``)."""
    return int(time.time() * 1000)


def bumped(txn: Txn, now: int) -> Row:
    """The ``epoch`` row of ``txn``'s next epoch (a new producer id at epoch 0 once the epoch is spent)."""
    pid, epoch = next_epoch(txn.producer_id, txn.epoch)
    return Row("epoch", txn.transactional_id, pid, epoch, now, txn.timeout_ms, txn.txn_seq)


def abort(table: TransactionTable, txn: Txn, why: str, *, bump: bool = False, by_end: bool = False) -> None:
    """Record the abort of ``txn``'s open transaction and drop what it staged; with ``bump``, the next
    epoch in the same Delta commit (a coordinator that takes the id over sees both or neither), ``by_end``
    when an EndTxn v5 asked for it (a retry of it is answered again). Caller holds ``txn.lock``."""
    now = now_ms()
    head = (txn.transactional_id, txn.producer_id, txn.epoch, now, txn.timeout_ms, txn.txn_seq)
    rows = [Row("complete_abort", *head)]
    if bump:
        rows.append(bumped(txn, now))
    table.append(rows)
    txn.clear()
    txn.state = TxnState.COMPLETE_ABORT
    if bump:
        ended = TxnState.COMPLETE_ABORT if by_end else None
        txn.set_producer(rows[-1].producer_id, rows[-1].producer_epoch, ended)
    logger.info("transactions: %s #%d aborted (%s)", txn.transactional_id, txn.txn_seq, why)


def expire(table: TransactionTable, txn: Txn, why: str = "") -> None:
    """Abort a transaction open longer than its timeout (or aborted by an administrator) and bump the
    epoch: its producer is fenced, as by Kafka's coordinator. Caller holds ``txn.lock``."""
    abort(table, txn, why or f"timed out after {txn.timeout_ms} ms", bump=True)
