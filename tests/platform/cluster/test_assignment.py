"""The controller's decisions as pure functions: replica assignment, elections, group coordinators."""

from __future__ import annotations

from collections import Counter

import pytest

from topiclake.errors import InvalidReplicationFactor
from topiclake.platform.cluster.assignment import (
    TopicSpec,
    assign_replicas,
    coordinator_for,
    leader_counts,
    reconcile,
)
from topiclake.platform.cluster.metadata import PartitionState


def test_replicas_are_distinct_brokers_and_leaders_spread_evenly() -> None:
    out = assign_replicas("orders", range(12), 3, [1, 2, 3, 4])
    assert len(out) == 12
    for replicas in out:
        assert len(replicas) == 3
        assert len(set(replicas)) == 3
        assert set(replicas) <= {1, 2, 3, 4}
    leaders = Counter(r[0] for r in out)
    assert set(leaders.values()) == {3}  # 12 partitions over 4 brokers: 3 each
    followers = Counter(b for r in out for b in r[1:])
    assert max(followers.values()) - min(followers.values()) <= 2


def test_assignment_is_deterministic_per_topic() -> None:
    assert assign_replicas("a", range(6), 2, [3, 1, 2]) == assign_replicas("a", range(6), 2, [1, 2, 3])


def test_more_replicas_than_brokers_is_refused() -> None:
    with pytest.raises(InvalidReplicationFactor, match="live brokers"):
        assign_replicas("t", range(1), 3, [1, 2])
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas("t", range(1), 0, [1, 2])


def _state(topic: str, p: int, leader: int, epoch: int, replicas: tuple[int, ...]) -> PartitionState:
    return PartitionState(topic, p, leader, epoch, replicas, replicas)


def test_new_topic_gets_a_state_for_every_partition() -> None:
    out = reconcile({}, {"t": TopicSpec(4, 2)}, live=[1, 2], settled=[1, 2])
    states = out["t"]
    assert [s.partition for s in states] == [0, 1, 2, 3]
    assert all(s.leader == s.replicas[0] and s.leader_epoch == 0 for s in states)
    assert leader_counts(out) == {1: 2, 2: 2}


def test_dead_leader_moves_to_first_live_replica_with_a_new_epoch() -> None:
    current = {"t": (_state("t", 0, 1, 4, (1, 2, 3)),)}
    out = reconcile(current, {"t": TopicSpec(1, 3)}, live=[2, 3], settled=[2, 3])
    s = out["t"][0]
    assert (s.leader, s.leader_epoch, s.isr) == (2, 5, (2, 3))


def test_partition_with_no_live_replica_keeps_its_leader_and_an_empty_isr() -> None:
    current = {"t": (_state("t", 0, 1, 4, (1,)),)}
    s = reconcile(current, {"t": TopicSpec(1, 1)}, live=[2], settled=[2])["t"][0]
    assert (s.leader, s.leader_epoch, s.isr) == (1, 4, ())


def test_preferred_replica_takes_leadership_back_only_once_settled() -> None:
    moved = {"t": (PartitionState("t", 0, 2, 5, (1, 2), (2,)),)}
    early = reconcile(moved, {"t": TopicSpec(1, 2)}, live=[1, 2], settled=[2])["t"][0]
    assert (early.leader, early.leader_epoch, early.isr) == (2, 5, (1, 2))
    back = reconcile(moved, {"t": TopicSpec(1, 2)}, live=[1, 2], settled=[1, 2])["t"][0]
    assert (back.leader, back.leader_epoch) == (1, 6)


def test_unchanged_state_is_returned_as_is_and_deleted_topics_drop_out() -> None:
    current = {"t": (_state("t", 0, 1, 0, (1, 2)),), "gone": (_state("gone", 0, 1, 0, (1,)),)}
    out = reconcile(current, {"t": TopicSpec(1, 2)}, live=[1, 2], settled=[1, 2])
    assert out == {"t": current["t"]}


def test_added_partitions_are_assigned_and_old_ones_kept() -> None:
    current = {"t": (_state("t", 0, 2, 3, (2, 1)),)}
    out = reconcile(current, {"t": TopicSpec(3, 2)}, live=[1, 2], settled=[1, 2])["t"]
    assert out[0] == current["t"][0]
    assert [s.partition for s in out] == [0, 1, 2]
    assert all(len(s.replicas) == 2 for s in out)


def test_group_coordinator_moves_only_the_dead_brokers_groups() -> None:
    groups = [f"g{i}" for i in range(200)]
    before = {g: coordinator_for(g, [1, 2, 3]) for g in groups}
    assert set(before.values()) == {1, 2, 3}
    after = {g: coordinator_for(g, [1, 2]) for g in groups}
    for g in groups:
        if before[g] != 3:
            assert after[g] == before[g]
        else:
            assert after[g] in (1, 2)
    assert coordinator_for("g", []) == -1


def test_rack_aware_replicas_span_both_racks_and_leaders_spread() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    out = assign_replicas("orders", range(12), 2, [1, 2, 3, 4], racks)
    for replicas in out:
        assert len(set(replicas)) == 2
        assert {racks[b] for b in replicas} == {"a", "b"}
    assert set(Counter(r[0] for r in out).values()) == {3}
    # without racks the same brokers put some partitions on one rack only
    plain = assign_replicas("orders", range(12), 2, [1, 2, 3, 4])
    assert any(len({racks[b] for b in r}) == 1 for r in plain)


def test_rack_aware_with_more_replicas_than_racks_uses_every_rack_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    for replicas in assign_replicas("t", range(10), 4, list(racks), racks):
        assert len(set(replicas)) == 4 and {racks[b] for b in replicas} == {"a", "b", "c"}


def test_a_broker_without_rack_means_rack_unaware() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: None, 4: "b"}
    assert assign_replicas("t", range(8), 2, [1, 2, 3, 4], racks) == assign_replicas(
        "t", range(8), 2, [1, 2, 3, 4]
    )


def test_reconcile_places_new_partitions_by_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    out = reconcile({}, {"t": TopicSpec(8, 2)}, live=[1, 2, 3, 4], settled=[1, 2, 3, 4], racks=racks)
    assert all({racks[b] for b in s.replicas} == {"a", "b"} for s in out["t"])


def test_a_partition_placed_with_too_few_live_brokers_gets_its_factor_when_they_are_live() -> None:
    """Placed while the controller saw one live broker (a view that lagged a broker's return), an RF-2
    topic's partitions gain a second replica once two are live; the preferred leader stays first."""
    first = reconcile({}, {"t": TopicSpec(3, 2)}, live=[1], settled=[1])
    assert all(s.replicas == (1,) for s in first["t"])
    out = reconcile(first, {"t": TopicSpec(3, 2)}, live=[1, 2, 3], settled=[1, 2, 3])
    for s in out["t"]:
        assert len(set(s.replicas)) == 2 and s.replicas[0] == 1 and s.leader == 1, s
        assert set(s.isr) == set(s.replicas)
    assert len({s.replicas[1] for s in out["t"]}) == 2  # followers spread
    racks = {1: "a", 2: "a", 3: "b"}
    out = reconcile(first, {"t": TopicSpec(3, 2)}, live=[1, 2, 3], settled=[1, 2, 3], racks=racks)
    assert all(s.replicas == (1, 3) for s in out["t"])  # the other rack first
    assert reconcile(out, {"t": TopicSpec(3, 2)}, live=[1, 2, 3], settled=[1, 2, 3], racks=racks) == out
