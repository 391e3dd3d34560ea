"""Kafka transactions (exactly once): the coordinator and its Delta table ``_system/transactions``.

A transaction's records are staged by the coordinator and enter the topic tables only when it commits, so
SQL and Spark never see an aborted record or one of a transaction still open (docs/transactions.md).
"""

from topiclake.platform.transactions._state import TxnState, TxnSummary
from topiclake.platform.transactions.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator", "TxnState", "TxnSummary"]
