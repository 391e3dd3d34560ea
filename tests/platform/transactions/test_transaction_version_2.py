"""Transaction version 2 (KIP-890 part 2) in the coordinator over real Delta tables: a commit decided with
its epoch bump and cut short is finished by the coordinator that takes the id over when the producer
retries with the epoch it had; a zombie fenced by InitProducerId is not taken for such a retry; a spent
epoch gives a new producer id, and a retry across it is answered again."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from txn_batches import batch, fail_on, table_values

from topiclake.errors import InvalidTxnState, ProducerFenced, StorageError
from topiclake.platform import Broker, Storage
from topiclake.platform.transactions import TransactionCoordinator


def test_a_decided_commit_is_finished_by_the_next_coordinator_on_the_producer_s_retry(
    storage: Storage, broker: Broker
) -> None:
    first = TransactionCoordinator(broker)
    info = first.init_producer_id("tid", 60_000)
    pid, e = info.producer_id, info.epoch
    # no AddPartitionsToTxn / AddOffsetsToTxn: the batch and the offsets add them
    first.stage("tid", pid, e, "t", 0, 0, batch("a", "b"), implicit=True)
    first.stage("tid", pid, e, "t", 1, 0, batch("c"), implicit=True)
    first.stage_offsets("tid", pid, e, "g", {("t", 0): (2, None)}, implicit=True)
    fail_on(first, "complete_commit")
    with pytest.raises(StorageError):  # decided (with the bump), rolled forward, not recorded complete
        first.end_txn("tid", pid, e, commit=True, bump=True)
    second = TransactionCoordinator(broker)  # the broker that takes the id over
    assert second.end_txn("tid", pid, e, commit=True, bump=True) == (pid, e + 1)  # the lost answer
    assert second.end_txn("tid", pid, e, commit=True, bump=True) == (pid, e + 1)  # and once more
    assert table_values(storage) == [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]
    assert broker.groups.committed("g")[("t", 0)].offset == 2
    with pytest.raises(ProducerFenced):  # a late batch of the committed transaction
        second.stage("tid", pid, e, "t", 0, 2, batch("late"), implicit=True)
    second.stage("tid", pid, e + 1, "t", 0, 0, batch("next"), implicit=True)
    with pytest.raises(ProducerFenced):  # a delayed EndTxn of the previous one commits nothing
        second.end_txn("tid", pid, e, commit=True, bump=True)
    # a new instance fences the producer: its epoch is one below the current, but no retry
    fresh = second.init_producer_id("tid", 60_000)
    assert fresh.epoch == e + 2
    with pytest.raises(ProducerFenced):
        second.end_txn("tid", pid, e + 1, commit=False, bump=True)
    with pytest.raises(InvalidTxnState):  # the new instance has nothing open to commit
        second.end_txn("tid", pid, fresh.epoch, commit=True, bump=True)
    assert table_values(storage) == [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]
    for c in (first, second):
        c.close()


def test_a_spent_epoch_gives_a_new_producer_id_and_a_retry_across_it_is_answered(
    storage: Storage, broker: Broker
) -> None:
    first = TransactionCoordinator(broker)
    info = first.init_producer_id("old", 60_000)
    first.close()
    # the id's epoch row again at 32765 (as after that many transactions), appended to the real table
    uri = storage.system_uri("transactions")
    rows = DeltaTable(uri).to_pyarrow_table()
    row = rows.filter(pc.equal(rows["kind"], "epoch"))
    late = pa.array([int(row["at_ms"][0].as_py()) + 1], pa.int64())
    row = row.set_column(
        row.schema.get_field_index("producer_epoch"), "producer_epoch", pa.array([32765], pa.int32())
    )
    write_deltalake(uri, row.set_column(row.schema.get_field_index("at_ms"), "at_ms", late), mode="append")
    coord = TransactionCoordinator(broker)
    again = coord.init_producer_id("old", 60_000)
    pid = info.producer_id
    assert (again.producer_id, again.epoch) == (pid, 32766)
    coord.stage("old", pid, 32766, "t", 0, 0, batch("x"), implicit=True)
    new_pid, epoch = coord.end_txn("old", pid, 32766, commit=True, bump=True)
    assert new_pid != pid and epoch == 0
    assert coord.end_txn("old", pid, 32766, commit=True, bump=True) == (new_pid, 0)  # a retry
    coord.stage("old", new_pid, 0, "t", 0, 0, batch("y"), implicit=True)
    assert coord.end_txn("old", new_pid, 0, commit=True, bump=True) == (new_pid, 1)
    assert table_values(storage) == [(0, 0, "x"), (0, 1, "y")]
    coord.close()
