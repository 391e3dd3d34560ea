"""The transaction coordinator over real Delta tables: a commit interrupted after its decision rolls
forward exactly once (also after a broker restart, also when the roll-forward had already appended),
fencing by epoch, and the timeout sweep."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from deltalake import DeltaTable
from txn_batches import batch, fail_on, table_values

from topiclake.errors import GroupNotFound, InvalidTxnState, ProducerFenced, RecordTooLarge, StorageError
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.platform.transactions import TransactionCoordinator, TxnState


def _open(coord: TransactionCoordinator, tid: str = "tid") -> tuple[int, int]:
    info = coord.init_producer_id(tid, 60_000)
    coord.add_partitions(tid, info.producer_id, info.epoch, [("t", 0), ("t", 1)])
    coord.stage(tid, info.producer_id, info.epoch, "t", 0, 0, batch("a", "b"))
    coord.stage(tid, info.producer_id, info.epoch, "t", 0, 0, batch("a", "b"))  # a retry: kept once
    coord.stage(tid, info.producer_id, info.epoch, "t", 1, 0, batch("c"))
    return info.producer_id, info.epoch


@pytest.mark.parametrize("crash_at", ["prepare_commit", "complete_commit"])
def test_a_commit_cut_short_ends_all_or_nothing_after_a_restart(
    storage: Storage, broker: Broker, crash_at: str
) -> None:
    first = TransactionCoordinator(broker)
    pid, epoch = _open(first)
    fail_on(first, crash_at)
    with pytest.raises(StorageError):
        first.end_txn("tid", pid, epoch, commit=True)
    broker.close()
    # a restarted broker (fresh producer state, read back from the table's txn actions) and coordinator
    again = Broker(storage, BrokerConfig(linger_ms=1))
    try:
        second = TransactionCoordinator(again)
        second.recover()
        expected = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]
        assert table_values(storage) == ([] if crash_at == "prepare_commit" else expected)  # never twice
        (summary,) = second.describe()
        # not decided: the transaction is still open (its batches were durable when answered)
        want = TxnState.COMPLETE_COMMIT if crash_at == "complete_commit" else TxnState.ONGOING
        assert summary.state is want
        assert (summary.producer_id, summary.epoch) == (pid, epoch)
        if crash_at == "prepare_commit":  # the producer retries its EndTxn: it commits now
            second.end_txn("tid", pid, epoch, commit=True)
        assert table_values(storage) == expected
        # recovering once more (another broker taking over) changes nothing
        TransactionCoordinator(again).recover()
        assert table_values(storage) == expected
        # the next instance gets a higher epoch, and its next commit appends after the first
        info = second.init_producer_id("tid", 60_000)
        assert (info.producer_id, info.epoch) == (pid, epoch + 1)
        second.add_partitions("tid", pid, info.epoch, [("t", 0)])
        second.stage("tid", pid, info.epoch, "t", 0, 0, batch("d"))
        second.end_txn("tid", pid, info.epoch, commit=True)
        assert (0, 2, "d") in table_values(storage)
        assert len(table_values(storage)) == len(expected) + 1
    finally:
        again.close()


def test_zombie_is_fenced_and_its_transaction_aborted(storage: Storage, broker: Broker) -> None:
    coord = TransactionCoordinator(broker)
    pid, old = _open(coord)
    new = coord.init_producer_id("tid", 60_000)
    assert new.epoch == old + 1
    with pytest.raises(ProducerFenced):
        coord.stage("tid", pid, old, "t", 0, 2, batch("z"))
    with pytest.raises(ProducerFenced):
        coord.end_txn("tid", pid, old, commit=True)
    with pytest.raises(InvalidTxnState):  # the new instance has no transaction open yet
        coord.end_txn("tid", pid, new.epoch, commit=True)
    assert table_values(storage) == []


def test_the_sweep_aborts_a_timed_out_transaction_and_bumps_the_epoch(
    storage: Storage, broker: Broker
) -> None:
    now = [100.0]
    coord = TransactionCoordinator(broker, clock=lambda: now[0])
    info = coord.init_producer_id("slow", 1_000)
    coord.add_partitions("slow", info.producer_id, info.epoch, [("t", 0)])
    coord.stage("slow", info.producer_id, info.epoch, "t", 0, 0, batch("late"))
    assert coord.abort_expired() == []
    now[0] += 1.5
    assert coord.abort_expired() == ["slow"]
    with pytest.raises(ProducerFenced):
        coord.end_txn("slow", info.producer_id, info.epoch, commit=True)
    assert table_values(storage) == []
    assert DeltaTable(storage.system_uri("transactions")).to_pyarrow_table().num_rows >= 3


def test_pipelined_batches_commit_in_sequence_order(storage: Storage, broker: Broker) -> None:
    coord = TransactionCoordinator(broker)
    info = coord.init_producer_id("pipe", 60_000)
    coord.add_partitions("pipe", info.producer_id, info.epoch, [("t", 0)])
    coord.stage("pipe", info.producer_id, info.epoch, "t", 0, 2, batch("c"))  # overtook its predecessor
    coord.stage("pipe", info.producer_id, info.epoch, "t", 0, 0, batch("a", "b"))
    coord.stage("pipe", info.producer_id, info.epoch, "t", 0, 2, batch("c"))  # a retry
    coord.end_txn("pipe", info.producer_id, info.epoch, commit=True)
    assert table_values(storage) == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]


def test_a_transaction_past_its_timeout_holds_no_offsets_and_cannot_commit_before_the_sweep(
    storage: Storage, broker: Broker
) -> None:
    # a restarted consumer asks for stable offsets before its producer's InitProducerId: it must not wait
    # for the sweep (nor lose the race with its own 60 s timeout, issue 31's flake)
    now = [100.0]
    coord = TransactionCoordinator(broker, clock=lambda: now[0])
    info = coord.init_producer_id("copier", 1_000)
    coord.add_offsets("copier", info.producer_id, info.epoch, "g")
    coord.stage_offsets("copier", info.producer_id, info.epoch, "g", {("t", 0): (5, None)})
    assert coord.pending_offsets("g") == {("t", 0)}
    now[0] += 1.5  # past the timeout; no sweep ran
    assert coord.pending_offsets("g") == set()
    with pytest.raises(ProducerFenced):
        coord.end_txn("copier", info.producer_id, info.epoch, commit=True)
    assert coord.abort_expired() == []  # already aborted and fenced by the late request
    assert coord.describe()[0].epoch == info.epoch + 1
    with pytest.raises(GroupNotFound):  # nothing was ever committed to the group
        broker.groups.committed("g")


def test_held_records_are_bounded_with_a_clear_error(storage: Storage, broker: Broker) -> None:
    one = batch("x" * 1000).nbytes
    coord = TransactionCoordinator(broker, max_held_bytes=int(2.5 * one))
    a = coord.init_producer_id("a", 60_000)
    b = coord.init_producer_id("b", 60_000)
    coord.add_partitions("a", a.producer_id, a.epoch, [("t", 0)])
    coord.add_partitions("b", b.producer_id, b.epoch, [("t", 1)])
    coord.stage("a", a.producer_id, a.epoch, "t", 0, 0, batch("x" * 1000))
    coord.stage("a", a.producer_id, a.epoch, "t", 0, 0, batch("x" * 1000))  # a retry takes no more room
    coord.stage("b", b.producer_id, b.epoch, "t", 1, 0, batch("x" * 1000))
    with pytest.raises(RecordTooLarge, match="commit in smaller transactions"):  # the bound is per broker
        coord.stage("b", b.producer_id, b.epoch, "t", 1, 1, batch("x" * 1000))
    coord.end_txn("a", a.producer_id, a.epoch, commit=True)  # its records left memory for the table
    coord.stage("b", b.producer_id, b.epoch, "t", 1, 1, batch("x" * 1000))
    coord.end_txn("b", b.producer_id, b.epoch, commit=True)
    assert [v for _p, _o, v in table_values(storage)] == ["x" * 1000] * 3


def test_compaction_clears_committed_records_and_keeps_what_recovery_needs(
    storage: Storage, broker: Broker
) -> None:
    coord = TransactionCoordinator(broker)
    pid, epoch = _open(coord)
    coord.end_txn("tid", pid, epoch, commit=True)
    pid, epoch = _open(coord, "cut")
    fail_on(coord, "complete_commit")  # decided, not complete: its records are still needed
    with pytest.raises(StorageError):
        coord.end_txn("cut", pid, epoch, commit=True)
    assert coord.compact(keep_ms=3_600_000) == 0  # nothing old enough
    assert coord.compact(keep_ms=0) == 2  # the complete commit's two batches, not the undecided's
    rows = DeltaTable(storage.system_uri("transactions")).to_pyarrow_table().to_pylist()
    held = sorted((r["transactional_id"], r["records"] is not None) for r in rows if r["kind"] == "staged")
    assert held == [("cut", True), ("cut", True), ("tid", False), ("tid", False)]  # a retry written once
    assert all(r["records"] is None for r in rows if r["kind"] == "prepare_commit")  # not written twice
    again = TransactionCoordinator(broker)  # a restart: the undecided commit rolls forward, once
    again.recover()
    assert sorted(v for _p, _o, v in table_values(storage)) == ["a", "a", "b", "b", "c", "c"]  # none twice
    again.close()
    coord.close()


def test_an_open_transaction_carries_on_at_the_coordinator_that_takes_it_over(
    storage: Storage, broker: Broker
) -> None:
    """Every answered request of an open transaction is in ``_system/transactions``: a second coordinator
    (another broker after the first one's death) loads its epoch, partitions, group, offsets and batches; a
    batch the dead one wrote and a retry sends again is kept once; the commit holds everything once."""
    first = TransactionCoordinator(broker)
    pid, epoch = _open(first)  # t/0: a, b (and its retry), t/1: c
    first.add_offsets("tid", pid, epoch, "g")
    first.stage_offsets("tid", pid, epoch, "g", {("t", 0): (2, None)})
    second = TransactionCoordinator(broker)
    assert second.pending_offsets("g") == set()  # not read yet: another broker's id, for all it knows
    second.stage("tid", pid, epoch, "t", 0, 0, batch("a", "b"))  # the dead one's batch, retried
    second.stage("tid", pid, epoch, "t", 0, 2, batch("d"))
    assert second.pending_offsets("g") == {("t", 0)}
    (summary,) = second.describe()
    assert (summary.state, summary.epoch, summary.partitions) == (
        TxnState.ONGOING,
        epoch,
        (("t", 0), ("t", 1)),
    )
    with pytest.raises(InvalidTxnState):  # the partitions are the transaction's, no others
        second.stage("tid", pid, epoch, "t", 2, 0, batch("x"))
    second.end_txn("tid", pid, epoch, commit=True)
    assert table_values(storage) == [(0, 0, "a"), (0, 1, "b"), (0, 2, "d"), (1, 0, "c")]
    assert [(k, c.offset) for k, c in broker.groups.committed("g").items()] == [(("t", 0), 2)]
    # the first coordinator, told the brokers changed, reads the id again: the next epoch fences the zombie
    third = TransactionCoordinator(broker)
    info = third.init_producer_id("tid", 60_000)
    first.brokers_changed()
    with pytest.raises(ProducerFenced):
        first.add_partitions("tid", pid, epoch, [("t", 0)])
    assert info.epoch == epoch + 1
    for c in (first, second, third):
        c.close()


def test_concurrent_requests_share_the_table_s_commits(storage: Storage, broker: Broker) -> None:
    """The batches of eight producers at once, each durable before its answer, in fewer Delta commits."""
    coord = TransactionCoordinator(broker)
    ids = [coord.init_producer_id(f"p{i}", 60_000) for i in range(8)]
    for i, info in enumerate(ids):
        coord.add_partitions(f"p{i}", info.producer_id, info.epoch, [("t", i % 2)])
    before = DeltaTable(storage.system_uri("transactions")).version()
    with ThreadPoolExecutor(8) as pool:
        jobs = [
            pool.submit(coord.stage, f"p{i}", info.producer_id, info.epoch, "t", i % 2, s, batch(f"{i}/{s}"))
            for s in range(5)
            for i, info in enumerate(ids)
        ]
        for job in jobs:
            job.result()
    commits = DeltaTable(storage.system_uri("transactions")).version() - before
    staged = [r for r in DeltaTable(storage.system_uri("transactions")).to_pyarrow_table().to_pylist()]
    assert sum(1 for r in staged if r["kind"] == "staged") == 40
    assert commits < 40, commits
    coord.close()


def test_the_sweep_leaves_the_transactions_of_ids_another_broker_coordinates_alone(
    storage: Storage, broker: Broker
) -> None:
    """A broker that served an id while the brokers disagreed on who is alive keeps its state of it; past
    the timeout its sweep must not abort (and fence) what the id's coordinator carries on meanwhile."""
    now = [100.0]
    coord = TransactionCoordinator(broker, clock=lambda: now[0])
    info = coord.init_producer_id("moved", 1_000)
    coord.add_partitions("moved", info.producer_id, info.epoch, [("t", 0)])
    coord.stage("moved", info.producer_id, info.epoch, "t", 0, 0, batch("kept"))
    now[0] += 1.5
    assert coord.abort_expired(owns=lambda tid: False) == []
    kinds = DeltaTable(storage.system_uri("transactions")).to_pyarrow_table()["kind"].to_pylist()
    assert "complete_abort" not in kinds and kinds.count("epoch") == 1
    assert coord.abort_expired(owns=lambda tid: True) == []  # stale now: read again on its next request


@pytest.mark.parametrize("after_s", [9.0, 10.5])
def test_a_slow_read_of_the_table_at_a_takeover_does_not_age_the_open_transaction(
    storage: Storage, broker: Broker, after_s: float
) -> None:
    """The coordinator that takes an open transaction over times it from its first row as of the end of its
    read of the table: over S3 under load that read took ~3 s, and the clock read before it aged the
    transaction by as much (the copier test's [s3] case: aborted, its copier fenced, 7 s into 10). The
    timeout still runs: past it the transaction is aborted."""
    first = TransactionCoordinator(broker)
    info = first.init_producer_id("tid", 10_000)
    first.add_partitions("tid", info.producer_id, info.epoch, [("t", 0)])
    first.stage("tid", info.producer_id, info.epoch, "t", 0, 0, batch("a"))
    now = [100.0]
    second = TransactionCoordinator(broker, clock=lambda: now[0])
    table: Any = second._table
    read = table.rows_of

    def slow_rows_of(tid: str) -> Any:
        now[0] += 5.0  # the read lasts 5 s of the coordinator's clock
        return read(tid)

    table.rows_of = slow_rows_of
    second.stage("tid", info.producer_id, info.epoch, "t", 0, 1, batch("b"))  # taken over, at 105
    now[0] = 105.0 + after_s
    if after_s < 10:
        assert second.abort_expired() == []
        second.end_txn("tid", info.producer_id, info.epoch, commit=True)
        assert table_values(storage) == [(0, 0, "a"), (0, 1, "b")]
    else:
        assert second.abort_expired() == ["tid"]
        assert table_values(storage) == []
    first.close()
    second.close()
