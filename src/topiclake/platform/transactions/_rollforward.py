"""Rolling a decided commit forward: its records into the topic tables, its offsets into the groups, then
``complete_commit`` into ``_system/transactions``. Idempotent: each partition's records are appended as one
request of an idempotent producer (the transaction's producer id and epoch, the sequence the decision
names), whose state the log commits as a Delta ``txn`` action with the records, so a replay is a duplicate."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

from topiclake.platform.broker import Broker
from topiclake.platform.records import ProducerInfo
from topiclake.platform.transactions._state import Txn
from topiclake.platform.transactions._table import Row, TransactionTable, ipc_to_table, offsets_from_json


def partition_producer_id(producer_id: int, partition: int) -> int:
    """The producer id a transaction's records of one partition are appended under (62 bits, stable)."""
    digest = hashlib.blake2b(f"{producer_id}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


class RollForward:
    """Applies decided commits of one coordinator.

    Args:
        broker: Whose logs and groups the records and offsets go to.
        table: The coordinator's ``_system/transactions``.
    """

    def __init__(self, broker: Broker, table: TransactionTable) -> None:
        self._broker = broker
        self._table = table
        self._threads = ThreadPoolExecutor(max_workers=8, thread_name_prefix="txn-roll-forward")

    def run(self, txn: Txn) -> None:
        """Apply ``txn.pending`` (the decision's rows) and record the transaction complete.

        Raises:
            TopiclakeError: An append or commit failed; running again later is safe.
        """
        # the partitions' appends at once (the log's group commit joins a topic's partitions in one Delta
        # commit), then the offsets: a consumer never sees the offsets before the records they follow
        parts = [row for row in txn.pending if row.table is not None or row.records is not None]
        appends = [self._threads.submit(self._append, row) for row in parts]
        for job in appends:
            job.result()
        for row in txn.pending:
            if row.group_id is not None and row.offsets is not None:
                offsets = offsets_from_json(row.offsets)
                if offsets:
                    self._broker.groups.commit(row.group_id, None, -1, offsets, foreign_ok=True)
        first = txn.pending[0] if txn.pending else None
        pid = first.producer_id if first is not None else txn.producer_id
        epoch = first.producer_epoch if first is not None else txn.epoch
        now = int(time.time() * 1000)
        self._table.append(
            [Row("complete_commit", txn.transactional_id, pid, epoch, now, txn.timeout_ms, txn.txn_seq)]
        )

    def _append(self, row: Row) -> None:
        assert row.topic is not None and row.partition is not None
        data = row.table if row.table is not None else ipc_to_table(row.records or b"")
        # one producer id per partition, numbered per topic (no scope): the same Delta txn app id whether
        # the leader is this broker or another one the append is forwarded to (forwarding keeps no scope)
        pid = partition_producer_id(row.producer_id, row.partition)
        producer = ProducerInfo(pid, row.producer_epoch, row.base_sequence or 0)
        self._broker.produce_arrow(row.topic, row.partition, data, acks="all", producer=producer)

    def close(self) -> None:
        """Release the threads (a roll-forward in progress finishes)."""
        self._threads.shutdown(wait=True)
