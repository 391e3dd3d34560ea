"""The KIP-848 group state machine (topiclake.kafka.consumer_groups) driven heartbeat by heartbeat, as a
client would: revocation before assignment, epochs and fencing, static membership, timeouts, assignors."""

from __future__ import annotations

import time

import pytest

from topiclake.kafka.classic_groups import GroupError
from topiclake.kafka.consumer_groups import (
    FENCED_MEMBER_EPOCH,
    STALE_MEMBER_EPOCH,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroups,
    Heartbeat,
)

TOPICS = {"t": 4}


class Client:
    """A member as a client drives it: remembers its id, epoch and what it owns."""

    def __init__(self, groups: ConsumerGroups, member_id: str, instance_id: str | None = None) -> None:
        self.groups, self.member_id, self.instance_id = groups, member_id, instance_id
        self.epoch = 0
        self.owned: frozenset[tuple[str, int]] = frozenset()

    def beat(self, assignor: str | None = None, full: bool = False) -> frozenset[tuple[str, int]]:
        joining = self.epoch == 0
        hb = Heartbeat(
            member_id=self.member_id,
            epoch=self.epoch,
            instance_id=self.instance_id,
            topics=("t",) if joining or full else None,
            assignor=assignor,
            owned=self.owned,
        )
        member, send = self.groups.heartbeat("g", hb, TOPICS)
        self.epoch = member.epoch
        if send is not None:
            self.owned = send  # the client revokes and assigns as told (its callbacks run here)
        return self.owned

    def leave(self, epoch: int = -1) -> None:
        self.groups.heartbeat("g", Heartbeat(member_id=self.member_id, epoch=epoch), TOPICS)


def _disjoint(*clients: Client) -> None:
    seen: set[tuple[str, int]] = set()
    for c in clients:
        assert not (seen & c.owned), "a partition owned by two members"
        seen |= c.owned


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them() -> None:
    groups = ConsumerGroups()
    a, b = Client(groups, "a"), Client(groups, "b")
    assert a.beat() == {("t", p) for p in range(4)} and a.epoch == 1
    b.beat()
    assert b.owned == frozenset() and b.epoch > a.epoch  # target epoch, partitions still a's
    _disjoint(a, b)
    a.beat()  # told to revoke two; keeps its epoch until it confirms
    assert len(a.owned) == 2 and a.epoch == 1
    _disjoint(a, b)
    b.beat()
    assert b.owned == frozenset()  # a has not confirmed yet
    a.beat()  # confirms (owned no longer lists them): moves to the new epoch
    assert a.epoch == b.epoch
    b.beat()
    assert len(b.owned) == 2
    _disjoint(a, b)
    assert groups.groups["g"].state == "Stable"
    a.leave()
    b.beat()
    assert b.owned == {("t", p) for p in range(4)}


def test_stale_and_fenced_epochs() -> None:
    groups = ConsumerGroups()
    a = Client(groups, "a")
    a.beat()
    with pytest.raises(GroupError) as err:
        groups.heartbeat("g", Heartbeat(member_id="a", epoch=a.epoch + 5), TOPICS)
    assert err.value.code == FENCED_MEMBER_EPOCH
    with pytest.raises(GroupError) as err:
        groups.check_commit("g", "a", a.epoch + 1)
    assert err.value.code == STALE_MEMBER_EPOCH
    groups.check_commit("g", "a", a.epoch)
    with pytest.raises(GroupError) as err:
        groups.heartbeat("g", Heartbeat(member_id="b", epoch=3), TOPICS)
    assert err.value.code == 25  # UNKNOWN_MEMBER_ID
    with pytest.raises(GroupError) as err:
        Client(groups, "c").beat(assignor="cooperative-sticky")
    assert err.value.code == UNSUPPORTED_ASSIGNOR


def test_static_member_leaves_for_a_while_and_its_successor_takes_its_place() -> None:
    groups = ConsumerGroups()
    a, b = Client(groups, "a", "inst-a"), Client(groups, "b", "inst-b")
    for _ in range(4):
        a.beat()
        b.beat()
    mine, epoch = a.owned, a.epoch
    assert len(mine) == 2
    with pytest.raises(GroupError) as err:  # the instance id is still in use
        Client(groups, "a2", "inst-a").beat()
    assert err.value.code == UNRELEASED_INSTANCE_ID
    a.leave(-2)
    group_epoch = groups.groups["g"].epoch
    a2 = Client(groups, "a2", "inst-a")
    assert a2.beat() == mine and a2.epoch == epoch  # same partitions, same epoch, no rebalance
    assert groups.groups["g"].epoch == group_epoch
    b.beat()
    _disjoint(a2, b)


def test_session_and_rebalance_timeouts_release_partitions() -> None:
    groups = ConsumerGroups(session_timeout_ms=1_000)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.beat()
    b.beat()
    groups.expire(time.monotonic() + 2)  # neither heartbeated: both gone
    assert not groups.active("g")
    a, b = Client(groups, "a"), Client(groups, "b")
    a.beat()
    groups.heartbeat("g", Heartbeat(member_id="b", epoch=0, topics=("t",), rebalance_timeout_ms=100), TOPICS)
    a.beat()  # told to revoke, never confirms
    assert groups.groups["g"].members["a"].revoking
    time.sleep(0.05)
    groups.groups["g"].members["a"].rebalance_timeout_s = 0.01
    groups.expire(time.monotonic())
    assert "a" not in groups.groups["g"].members


def test_range_assignor_gives_consecutive_partitions() -> None:
    groups = ConsumerGroups()
    a, b = Client(groups, "a"), Client(groups, "b")
    a.beat(assignor="range")
    b.beat(assignor="range")
    for _ in range(3):
        a.beat()
        b.beat()
    assert groups.groups["g"].assignor == "range"
    assert {a.owned, b.owned} == {frozenset({("t", 0), ("t", 1)}), frozenset({("t", 2), ("t", 3)})}
