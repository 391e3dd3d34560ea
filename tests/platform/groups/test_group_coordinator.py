"""The group coordinator over a real broker and real Delta tables: assignment, rebalances, fencing,
delivery semantics, restart, offset administration."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from topiclake.errors import (
    GroupNotEmpty,
    GroupNotFound,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidRequest,
    NoOffsetForPartition,
    OffsetOutOfRange,
    RebalanceInProgress,
    UnknownMemberId,
)
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.groups.assignors import ASSIGNORS
from topiclake.platform.groups.group_coordinator import GroupCoordinator, JoinResult

TP = tuple[str, int]


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


@pytest.fixture
def broker(warehouse: Path) -> Iterator[Broker]:
    b = Broker(Storage(str(warehouse)), BrokerConfig(linger_ms=1))
    b.create_topic("t", 4)
    b.produce("t", [Record(value=b"%d" % i, partition=i % 4) for i in range(40)])  # 10 per partition
    yield b
    b.close()


@pytest.fixture
def coord(broker: Broker) -> Iterator[GroupCoordinator]:
    c = GroupCoordinator(broker)
    yield c
    c.close()


class Client:
    """A member as a client sees it: the generation and assignment of the last answer."""

    def __init__(self, coord: GroupCoordinator, group: str, joined: JoinResult) -> None:
        self.coord, self.group = coord, group
        self.member_id = joined.member_id
        self.generation = joined.generation_id
        self.assignment: list[TP] = joined.assignment

    def beat(self) -> bool:
        r = self.coord.heartbeat(self.group, self.member_id, self.generation)
        self.generation, self.assignment = r.generation_id, r.assignment
        return r.rebalance_in_progress


def join(coord: GroupCoordinator, group: str = "g", **kw: object) -> Client:
    kw.setdefault("topics", ["t"])
    kw.setdefault("session_timeout_ms", 10_000)
    return Client(coord, group, coord.join(group, **kw))  # type: ignore[arg-type]


def settle(clients: list[Client], rounds: int = 10) -> None:
    for _ in range(rounds):
        busy = [c.beat() for c in clients]
        if not any(busy) and len({c.generation for c in clients}) == 1:
            return
    raise AssertionError("group did not settle")


def check_exclusive(clients: list[Client], partitions: int = 4) -> None:
    owned = [tp for c in clients for tp in c.assignment]
    assert len(owned) == len(set(owned)), f"a partition is held twice: {owned}"
    assert sorted(owned) == [("t", p) for p in range(partitions)]


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_1_2_5_members_share_4_partitions(coord: GroupCoordinator, assignor: str) -> None:
    a = join(coord, assignor=assignor)
    assert a.assignment == [("t", p) for p in range(4)]
    b = join(coord, assignor=assignor)
    settle([a, b])
    assert len(a.assignment) == len(b.assignment) == 2
    check_exclusive([a, b])
    more = [join(coord, assignor=assignor) for _ in range(3)]
    clients = [a, b, *more]
    settle(clients)
    check_exclusive(clients)
    assert sorted(len(c.assignment) for c in clients) == [0, 1, 1, 1, 1]
    d = coord.describe("g")
    assert d.state == "Stable" and len(d.members) == 5 and d.assignor == assignor


def test_member_that_stops_heartbeating_loses_partitions_and_no_record_is_skipped(
    coord: GroupCoordinator, broker: Broker
) -> None:
    a = join(coord, session_timeout_ms=300)
    b = join(coord, session_timeout_ms=300)
    settle([a, b])
    processed: list[TP] = []  # (partition, offset) of every record handed to the application
    positions: dict[str, dict[TP, int]] = {a.member_id: {}, b.member_id: {}}

    def step(c: Client, commit: bool = True) -> None:
        c.beat()
        pos = positions[c.member_id]
        for tp in list(pos):
            if tp not in c.assignment:
                del pos[tp]
        for tp in c.assignment:
            if tp not in pos:
                pos[tp] = coord.resolve_position("g", tp[0], tp[1], "earliest")
            res = broker.fetch(tp[0], tp[1], pos[tp], max_records=3)
            processed.extend((tp[1], int(o)) for o in res.records["offset"].to_pylist())
            pos[tp] = res.next_offset
        if commit and pos:
            coord.commit("g", c.member_id, c.generation, dict(pos))

    step(a)
    step(b)
    step(b, commit=False)  # b processes more, then dies without committing
    killed_at = time.monotonic()
    while len(a.assignment) < 4:
        step(a)
        time.sleep(0.05)
        assert time.monotonic() - killed_at < 2.0, "partitions were not reassigned"
    assert time.monotonic() - killed_at < 0.3 + 0.5
    for _ in range(10):
        step(a)
    everything = {(p, o) for p in range(4) for o in range(10)}
    assert set(processed) == everything  # nothing skipped
    assert len(processed) > len(everything)  # b's uncommitted records were redelivered (at-least-once)
    assert {tp: c.offset for tp, c in coord.committed("g").items()} == {("t", p): 10 for p in range(4)}
    with pytest.raises(UnknownMemberId, match="join again"):
        coord.heartbeat("g", b.member_id, b.generation)


def test_at_least_once_redelivers_after_crash(coord: GroupCoordinator, broker: Broker) -> None:
    a = join(coord)
    res = broker.fetch("t", 0, coord.resolve_position("g", "t", 0, "earliest"), max_records=10)
    seen = res.records["offset"].to_pylist()[:6]  # processed 6 ...
    coord.commit("g", a.member_id, a.generation, {("t", 0): 4})  # ... but committed only after 4
    coord.leave("g", a.member_id)  # crash: dropped from the group
    join(coord)
    start = coord.resolve_position("g", "t", 0, "earliest")
    redelivered = broker.fetch("t", 0, start, max_records=10).records["offset"].to_pylist()
    assert start == 4 and set(seen) & set(redelivered) == {4, 5}


def test_at_most_once_never_redelivers(coord: GroupCoordinator, broker: Broker) -> None:
    a = join(coord)
    res = broker.fetch("t", 0, coord.resolve_position("g", "t", 0, "earliest"), max_records=5)
    coord.commit("g", a.member_id, a.generation, {("t", 0): res.next_offset})  # commit before processing
    coord.leave("g", a.member_id)  # crash before processing anything
    join(coord)
    start = coord.resolve_position("g", "t", 0, "earliest")
    later = broker.fetch("t", 0, start, max_records=10).records["offset"].to_pylist()
    assert start == 5 and not set(later) & set(res.records["offset"].to_pylist())


def test_restart_keeps_committed_offsets_and_lag(warehouse: Path, broker: Broker) -> None:
    coord = GroupCoordinator(broker)
    a = join(coord)
    coord.commit("g", a.member_id, a.generation, {("t", 0): (3, "x"), ("t", 1): 10})
    lag_before = coord.lag("g")
    committed_before = coord.committed("g")
    coord.close()
    broker.close()
    b2 = Broker(Storage(str(warehouse)), BrokerConfig(linger_ms=1))
    c2 = GroupCoordinator(b2)
    try:
        assert c2.committed("g") == committed_before
        assert [(x.topic, x.partition, x.committed_offset, x.lag) for x in c2.lag("g")] == [
            (x.topic, x.partition, x.committed_offset, x.lag)
            for x in lag_before
            if x.committed_offset is not None
        ]
        assert c2.describe("g").state == "Empty"
        with pytest.raises(GroupNotFound):
            c2.heartbeat("g", a.member_id, a.generation)  # membership is not durable: rejoin
    finally:
        c2.close()
        b2.close()


def test_errors_are_clear_and_nothing_is_written(coord: GroupCoordinator, broker: Broker) -> None:
    a = join(coord)
    version = coord.store.stats()["version"]
    with pytest.raises(OffsetOutOfRange, match="beyond its end offset 10"):
        coord.commit("g", a.member_id, a.generation, {("t", 0): 11})
    with pytest.raises(InvalidRequest):
        coord.commit("g", a.member_id, a.generation, {("t", 0): -1})
    with pytest.raises(GroupNotFound):
        coord.heartbeat("nope", a.member_id, 1)
    with pytest.raises(GroupNotFound):
        coord.describe("nope")
    with pytest.raises(UnknownMemberId):
        coord.commit("g", "ghost", a.generation, {("t", 0): 1})
    with pytest.raises(UnknownMemberId):
        coord.join("g", "ghost", topics=["t"])
    with pytest.raises(GroupNotEmpty):
        coord.commit("g", None, -1, {("t", 0): 1})  # simple commit while the group has members
    with pytest.raises(InconsistentGroupProtocol):
        coord.join("g", topics=["t"], assignor="roundrobin")
    with pytest.raises(InvalidRequest):
        coord.join("g", topics=["t"], pattern="t.*")
    with pytest.raises(InvalidRequest):
        coord.join("g", pattern="(")
    with pytest.raises(InvalidRequest):
        coord.join("g", topics=["t"], session_timeout_ms=1)
    b = join(coord)  # generation 2
    old = a.generation
    a.beat()
    a.beat()
    b.beat()
    assert a.generation > old
    with pytest.raises(IllegalGeneration, match="join the group again"):
        coord.heartbeat("g", a.member_id, old - 1 if old > 1 else 99)
    with pytest.raises(IllegalGeneration, match="stale"):
        coord.commit("g", a.member_id, 99, {("t", 0): 1})
    assert coord.store.stats()["version"] == version
    assert coord.committed("g") == {}


def test_commit_from_a_member_that_has_not_seen_the_rebalance(coord: GroupCoordinator) -> None:
    a = join(coord)  # owns all 4 in generation 1
    b = join(coord)  # generation 2: range splits the partitions at once (eager); a has not heard yet
    now = {m.member_id: m.assignment for m in coord.describe("g").members}
    kept, moved = now[a.member_id][0], now[b.member_id][0]
    with pytest.raises(RebalanceInProgress, match="heartbeat"):
        coord.commit("g", a.member_id, a.generation, {moved: 1})  # moved to b: refused
    coord.commit("g", a.member_id, a.generation, {kept: 1})  # still a's: accepted
    settle([a, b])
    coord.commit("g", b.member_id, b.generation, {moved: 2})
    assert {tp: c.offset for tp, c in coord.committed("g").items()} == {kept: 1, moved: 2}


def test_sticky_keeps_assignments(coord: GroupCoordinator) -> None:
    clients = [join(coord, assignor="sticky") for _ in range(2)]
    settle(clients)
    before = {c.member_id: set(c.assignment) for c in clients}
    clients.append(join(coord, assignor="sticky"))
    settle(clients)
    for c in clients[:2]:
        assert set(c.assignment) <= before[c.member_id]
    check_exclusive(clients)
    coord.leave("g", clients[2].member_id)
    kept = {c.member_id: set(c.assignment) for c in clients[:2]}
    settle(clients[:2])
    for c in clients[:2]:
        assert kept[c.member_id] <= set(c.assignment)


def test_cooperative_never_double_assigns(coord: GroupCoordinator) -> None:
    clients: list[Client] = []

    def held_once() -> None:
        owned = [tp for c in clients for tp in c.assignment]
        assert len(owned) == len(set(owned)), owned

    for _ in range(4):
        clients.append(join(coord, assignor="cooperative-sticky"))
        held_once()
        for _ in range(4):
            for c in clients:
                c.beat()
                held_once()
    check_exclusive(clients)
    coord.leave("g", clients.pop(0).member_id)
    for _ in range(3):
        for c in clients:
            c.beat()
            held_once()
    check_exclusive(clients)


def test_static_member_restart_avoids_rebalance(coord: GroupCoordinator) -> None:
    a = join(coord, group_instance_id="host-a", session_timeout_ms=500)
    b = join(coord, group_instance_id="host-b", session_timeout_ms=500)
    settle([a, b])
    generation, assignment = a.generation, a.assignment
    # a "restarts": its process is gone, a new one joins with the same instance id within the timeout
    a2 = join(coord, group_instance_id="host-a", session_timeout_ms=500)
    assert a2.member_id != a.member_id
    assert (a2.generation, a2.assignment) == (generation, assignment)
    assert not b.beat() and b.generation == generation
    with pytest.raises(UnknownMemberId):
        coord.heartbeat("g", a.member_id, generation)  # the old incarnation is fenced


def test_pattern_subscription_picks_up_new_topics(coord: GroupCoordinator, broker: Broker) -> None:
    broker.create_topic("ev-1", 2)
    a = join(coord, topics=None, pattern=r"ev-\d+")
    assert a.assignment == [("ev-1", 0), ("ev-1", 1)]
    broker.create_topic("ev-2", 1)
    broker.create_topic("other", 1)
    assert a.beat()
    assert a.assignment == [("ev-1", 0), ("ev-1", 1), ("ev-2", 0)]


def test_max_poll_interval_removes_a_member_that_does_not_poll(coord: GroupCoordinator) -> None:
    a = join(coord, max_poll_interval_ms=600)
    time.sleep(0.4)
    coord.record_poll("g", a.member_id)
    time.sleep(0.4)
    a.beat()  # 0.8 s after the join, but within 600 ms of the poll
    time.sleep(0.7)
    with pytest.raises(UnknownMemberId):
        a.beat()


def test_resolve_position(coord: GroupCoordinator) -> None:
    assert coord.resolve_position("g", "t", 0, "earliest") == 0
    assert coord.resolve_position("g", "t", 0, "latest") == 10
    with pytest.raises(NoOffsetForPartition):
        coord.resolve_position("g", "t", 0, "none")
    coord.commit("g", None, -1, {("t", 0): 7})
    assert coord.resolve_position("g", "t", 0, "none") == 7


def test_lag_flags_partitions_without_commit(coord: GroupCoordinator) -> None:
    a = join(coord)
    coord.commit("g", a.member_id, a.generation, {("t", 0): 4})
    lags = {x.partition: x for x in coord.lag("g")}
    assert (lags[0].lag, lags[0].estimated) == (6, False)
    assert (lags[1].lag, lags[1].estimated, lags[1].committed_offset) == (10, True, None)
    assert lags[1].member_id == a.member_id


def test_reset_offsets(coord: GroupCoordinator, broker: Broker) -> None:
    a = join(coord)
    coord.commit("g", a.member_id, a.generation, {("t", 0): 5, ("t", 1): 5})
    with pytest.raises(GroupNotEmpty):
        coord.reset_offsets("g", "earliest")
    coord.leave("g", a.member_id)
    plan = coord.reset_offsets("g", "shift", -7, dry_run=True)
    assert [(e.partition, e.current_offset, e.new_offset) for e in plan] == [(0, 5, 0), (1, 5, 0)]
    assert coord.committed("g")[("t", 0)].offset == 5  # dry run changed nothing
    coord.reset_offsets("g", "shift", 3)
    assert {tp: c.offset for tp, c in coord.committed("g").items()} == {("t", 0): 8, ("t", 1): 8}
    coord.reset_offsets("g", "offset", 99, topics=["t"])
    assert {c.offset for c in coord.committed("g").values()} == {10}
    coord.reset_offsets("g", "earliest", partitions=[("t", 2)])
    assert coord.committed("g")[("t", 2)].offset == 0
    coord.reset_offsets("g", "timestamp", 0, partitions=[("t", 3)])
    assert coord.committed("g")[("t", 3)].offset == 0
    with pytest.raises(InvalidRequest):
        coord.reset_offsets("g", "offset")  # no value


def test_delete_group(coord: GroupCoordinator, broker: Broker, warehouse: Path) -> None:
    a = join(coord)
    coord.commit("g", a.member_id, a.generation, {("t", 0): 5})
    with pytest.raises(GroupNotEmpty):
        coord.delete_group("g")
    coord.leave("g", a.member_id)
    coord.delete_group("g")
    with pytest.raises(GroupNotFound):
        coord.delete_group("g")
    assert "g" not in {x.group_id for x in coord.list_groups()}
    again = GroupCoordinator(broker)
    try:
        with pytest.raises(GroupNotFound):
            again.committed("g")
    finally:
        again.close()
