"""Brokers over one warehouse in one process: election, leadership, failover, fences.

Real Delta tables and real heartbeat files; timings are shortened so each test takes a few seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from topiclake.errors import BrokerIdInUse, InvalidReplicationFactor, NotLeader, StorageError, TopicNotFound
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.cluster.state_table import StateTable

FAST = {
    "linger_ms": 1.0,
    "heartbeat_interval_ms": 100,
    "session_timeout_ms": 1_000,
    "leader_rebalance_delay_ms": 500,
    "maintenance": False,
}


def start(warehouse: Path, broker_id: int) -> Broker:
    broker = Broker(Storage(str(warehouse)), BrokerConfig(broker_id=broker_id, **FAST))  # type: ignore[arg-type]
    broker.join_cluster()
    return broker


def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, Broker]]:
    brokers = {i: start(tmp_path, i) for i in (1, 2, 3)}
    until(lambda: all(len(b.metadata().brokers) == 3 for b in brokers.values()))
    yield brokers
    for b in brokers.values():
        b.close()


def views(brokers: dict[int, Broker], topic: str) -> list[list[tuple[int, int]]]:
    out = []
    for b in brokers.values():
        meta = b.metadata()
        out.append([(s.leader, s.leader_epoch) for s in meta.partitions.get(topic, ())])
    return out


def test_brokers_elect_one_controller_and_share_the_leaders(cluster: dict[int, Broker]) -> None:
    controllers = {b.metadata().controller_id for b in cluster.values()}
    assert len(controllers) == 1 and controllers <= {1, 2, 3}
    assert sum(b.cluster.is_controller for b in cluster.values() if b.cluster) == 1
    cluster[2].create_topic("orders", partitions=6)
    until(lambda: all(v == views(cluster, "orders")[0] for v in views(cluster, "orders")))
    states = cluster[1].metadata().partitions["orders"]
    assert sorted(s.leader for s in states) == [1, 1, 2, 2, 3, 3]
    assert all(len(set(s.replicas)) == 3 and s.isr == s.replicas for s in states)
    assert cluster[1].describe_topic("orders").config.replication_factor == 3
    # each broker leads exactly its partitions; the others answer NotLeader (no forwarder here)
    for s in states:
        res = cluster[s.leader].produce("orders", [Record(b"k", b"v")], partition=s.partition)
        assert res[0].offset == 0
        other = next(i for i in cluster if i != s.leader)
        (refused,) = cluster[other].produce("orders", [Record(b"k", b"v")], partition=s.partition)
        assert isinstance(refused.error, NotLeader) and refused.error.details["leader_id"] == s.leader
        with pytest.raises(NotLeader):
            cluster[other].fetch("orders", s.partition, 0)


def test_replication_factor_above_live_brokers_is_refused(cluster: dict[int, Broker]) -> None:
    with pytest.raises(InvalidReplicationFactor, match="live brokers"):
        cluster[1].create_topic("wide", partitions=1, configs={"replication.factor": 4})
    assert not cluster[1].catalog.exists("wide")


def test_a_live_brokers_id_is_refused(cluster: dict[int, Broker], tmp_path: Path) -> None:
    twin = Broker(Storage(str(tmp_path)), BrokerConfig(broker_id=2, **FAST))  # type: ignore[arg-type]
    try:
        with pytest.raises(BrokerIdInUse, match="broker id 2 is held by a live broker"):
            twin.join_cluster()
    finally:
        twin.close()


def test_a_stopped_brokers_partitions_move_and_come_back(cluster: dict[int, Broker], tmp_path: Path) -> None:
    cluster[1].create_topic("moves", partitions=3)
    until(lambda: len({tuple(v) for v in views(cluster, "moves")}) == 1)
    before = {s.partition: s for s in cluster[1].metadata().partitions["moves"]}
    led_by_2 = [p for p, s in before.items() if s.leader == 2]
    assert led_by_2
    p = led_by_2[0]
    assert cluster[2].produce("moves", [Record(b"a", b"1")], partition=p)[0].offset == 0
    cluster.pop(2).close()
    survivors = cluster

    def moved() -> bool:
        s = survivors[1].metadata().partition("moves", p)
        return s is not None and s.leader != 2 and 2 not in s.isr

    until(moved)
    s = survivors[1].metadata().partition("moves", p)
    assert s is not None and s.leader_epoch == before[p].leader_epoch + 1
    until(lambda: survivors[s.leader].log("moves").leads(p))
    assert survivors[s.leader].produce("moves", [Record(b"b", b"2")], partition=p)[0].offset == 1
    # broker 2 returns: it takes its preferred partition back and continues the offsets
    survivors[2] = start(tmp_path, 2)

    def back() -> bool:
        st = survivors[2].metadata().partition("moves", p)
        return st is not None and st.leader == 2 and survivors[2].log("moves").leads(p)

    until(back)
    assert survivors[2].produce("moves", [Record(b"c", b"3")], partition=p)[0].offset == 2
    rows = DeltaTable(survivors[1].storage.topic_uri("moves")).to_pyarrow_table().to_pylist()
    mine = sorted((r["offset"], r["value"]) for r in rows if r["partition"] == p)
    assert mine == [(0, b"1"), (1, b"2"), (2, b"3")]


def test_a_new_controller_takes_over_and_handles_the_next_death(cluster: dict[int, Broker]) -> None:
    cluster[3].create_topic("ctl", partitions=3)
    first = cluster[1].metadata().controller_id
    epoch = StateTable(cluster[1].storage).read().controller_epoch
    cluster.pop(first).close()
    rest = list(cluster.values())
    until(lambda: rest[0].metadata().controller_id not in (first, -1))
    state = StateTable(rest[0].storage).read()
    assert state.controller_epoch > epoch and state.controller_id in cluster
    victim = next(i for i in cluster if i != state.controller_id)
    cluster.pop(victim).close()
    (last,) = cluster.values()
    until(lambda: all(s.leader == last.config.broker_id for s in last.metadata().partitions["ctl"]))
    assert [b.broker_id for b in last.metadata().brokers] == [last.config.broker_id]


def test_a_deposed_controller_cannot_overwrite_its_successor(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    old, new = StateTable(storage), StateTable(storage)
    v0 = old.write(1, 1, (1, 2), {}, -1)
    assert v0 == 0
    new.write(2, 2, (1, 2), {}, v0)  # broker 2 claims epoch 2 on version 0
    with pytest.raises(StorageError):
        old.write(1, 1, (1,), {}, v0)  # broker 1 still believes in version 0
    state = StateTable(storage).read()
    assert (state.controller_id, state.controller_epoch, state.live) == (2, 2, (1, 2))


def test_a_deposed_leader_is_fenced_by_the_new_leaders_epoch(tmp_path: Path) -> None:
    a = Broker(Storage(str(tmp_path)), BrokerConfig(broker_id=1, **FAST))  # type: ignore[arg-type]
    b = Broker(Storage(str(tmp_path)), BrokerConfig(broker_id=2, **FAST))  # type: ignore[arg-type]
    try:
        a.create_topic("fence", partitions=1)
        a.log("fence").set_leadership({0: 1})
        assert a.produce("fence", [Record(None, b"a1")])[0].offset == 0
        b.log("fence").set_leadership({0: 2})  # the controller moved the partition to b, epoch 2
        assert b.produce("fence", [Record(None, b"b1")])[0].offset == 1
        with pytest.raises(NotLeader, match="newer leader"):
            a.produce("fence", [Record(None, b"a2")])  # a has not heard yet: its commit is fenced
        assert not a.log("fence").leads(0)
        assert b.produce("fence", [Record(None, b"b2")])[0].offset == 2
        rows = DeltaTable(a.storage.topic_uri("fence")).to_pyarrow_table().sort_by("offset").to_pylist()
        assert [(r["offset"], r["value"]) for r in rows] == [(0, b"a1"), (1, b"b1"), (2, b"b2")]
    finally:
        a.close()
        b.close()


def test_a_commit_in_flight_when_leadership_moves_never_lands_on_the_new_leaders_offsets(
    tmp_path: Path,
) -> None:
    """Broker a's commit is held while the partition moves to b and b commits the same offset: a loses
    that version to b and, no longer the leader, gives its batch up (NotLeader) instead of landing it at
    the next version with an offset b wrote (seen on S3 after a kill -9: two records at one offset)."""
    config = {**FAST, "maintenance": True}  # the append path that writes log entries itself
    a = Broker(Storage(str(tmp_path)), BrokerConfig(broker_id=1, **config))  # type: ignore[arg-type]
    b = Broker(Storage(str(tmp_path)), BrokerConfig(broker_id=2, **config))  # type: ignore[arg-type]
    try:
        a.create_topic("moved", partitions=1)
        a.log("moved").set_leadership({0: 1})
        assert a.produce("moved", [Record(None, b"a1")])[0].offset == 0
        outcome: list[object] = []
        with a.log("moved").hold_commits():
            held = threading.Thread(target=lambda: outcome.append(_produce(a, "moved", b"a2")))
            held.start()
            until(lambda: bool(a.log("moved")._inflight))
            a.log("moved").set_leadership({})  # moved away while a's batch is in flight
            b.log("moved").set_leadership({0: 2})
            assert b.produce("moved", [Record(None, b"b1")])[0].offset == 1
        held.join(30)
        assert isinstance(outcome[0], NotLeader), outcome
        rows = DeltaTable(a.storage.topic_uri("moved")).to_pyarrow_table().sort_by("offset").to_pylist()
        assert [(r["offset"], r["value"]) for r in rows] == [(0, b"a1"), (1, b"b1")]
    finally:
        a.close()
        b.close()


def _produce(broker: Broker, topic: str, value: bytes) -> object:
    try:
        return broker.produce(topic, [Record(None, value)])[0].offset
    except NotLeader as exc:
        return exc


def test_admin_changes_made_through_one_broker_reach_the_others(cluster: dict[int, Broker]) -> None:
    cluster[1].create_topic("admin", partitions=2, configs={"replication.factor": 3})
    until(lambda: all(len(b.metadata().partitions.get("admin", ())) == 2 for b in cluster.values()))
    for b in cluster.values():
        b.log("admin")  # every broker has the topic open
    # grown through broker 1: every broker leads its share of the new partitions and can write them
    cluster[1].increase_partitions("admin", 6)
    until(lambda: all(len(b.metadata().partitions.get("admin", ())) == 6 for b in cluster.values()))
    states = cluster[2].metadata().partitions["admin"]
    for s in states[2:]:
        until(lambda s=s: cluster[s.leader].log("admin").leads(s.partition))
        assert cluster[s.leader].produce("admin", [Record(None, b"x")], partition=s.partition)[0].offset == 0
    # configs changed through broker 2 apply on the others
    cluster[2].alter_topic_configs("admin", {"max.message.bytes": 100})
    until(lambda: all(b.log("admin").info.config.max_message_bytes == 100 for b in cluster.values()))
    s0 = states[0]
    (too_big,) = cluster[s0.leader].produce("admin", [Record(None, b"y" * 200)], partition=0)
    assert too_big.error is not None and too_big.error.code == "record_too_large"
    # deleted through broker 3: the others close their logs and answer TopicNotFound
    cluster[3].delete_topic("admin")
    until(lambda: all("admin" not in {lg.topic for lg in b.open_logs()} for b in cluster.values()))
    for b in cluster.values():
        with pytest.raises(TopicNotFound):
            b.produce("admin", [Record(None, b"z")], partition=0)
    until(lambda: all("admin" not in b.metadata().partitions for b in cluster.values()))


def test_offsets_are_listed_while_the_log_takes_a_partition_over(
    cluster: dict[int, Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window after a failover in which the cluster already names this broker the leader but its log
    has not taken the partition over yet: ListOffsets is answered from the log, not routed back to itself
    (it recursed until Python's limit and a Kafka client got UNKNOWN_SERVER_ERROR)."""
    cluster[1].create_topic("ends", partitions=3)
    until(lambda: all(v == views(cluster, "ends")[0] for v in views(cluster, "ends")))
    state = next(s for s in cluster[1].metadata().partitions["ends"] if s.leader == 1)
    assert cluster[1].produce("ends", [Record(b"k", b"v")], partition=state.partition)[0].offset == 0
    log = cluster[1].log("ends")
    monkeypatch.setattr(log, "leads", lambda partition: False)  # the log's view lags the cluster's
    assert cluster[1].list_offsets("ends", state.partition, "latest") == 1
    assert cluster[1].list_offsets("ends", state.partition, "earliest") == 0
