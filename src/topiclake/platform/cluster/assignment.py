"""What the controller decides, as pure functions: replica assignment and leader election.

Replica assignment follows Kafka's rack-unaware scheme (``AdminUtils.assignReplicasToBrokers``): the first
replica of partition ``p`` is broker ``(p + start) % n`` of the sorted live brokers, the others follow at a
shift that grows after each round, so leaders and replicas spread evenly. Election keeps a live leader,
moves a dead leader's partition to the first live replica (leader epoch + 1), and gives leadership back to
the preferred (first) replica once it has been alive for a while.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from topiclake.errors import InvalidReplicationFactor
from topiclake.platform.cluster.metadata import PartitionState


def assign_replicas(
    topic: str, partitions: range, replication_factor: int, brokers: Sequence[int]
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``partitions`` of a topic over ``brokers``.

    Raises:
        InvalidReplicationFactor: More replicas asked for than there are live brokers.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if replication_factor < 1 or replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} for topic {topic} is not between 1 and the number "
            f"of live brokers ({n}: {ids})",
            topic=topic,
            replication_factor=replication_factor,
            live_brokers=n,
        )
    start = zlib.crc32(topic.encode()) % n  # deterministic, so a retried assignment gives the same answer
    shift0 = (zlib.crc32(topic.encode()[::-1]) % (n - 1)) if n > 1 else 0
    out: list[tuple[int, ...]] = []
    for p in partitions:
        first = (p + start) % n
        shift = shift0 + p // n
        replicas = [ids[first]]
        for j in range(1, replication_factor):
            step = 1 + (shift + j - 1) % (n - 1)
            replicas.append(ids[(first + step) % n])
        out.append(tuple(replicas))
    return out


@dataclass(frozen=True)
class TopicSpec:
    """What the catalog says of a topic: its partition count and replication factor."""

    partitions: int
    replication_factor: int


def reconcile(
    current: Mapping[str, Sequence[PartitionState]],
    topics: Mapping[str, TopicSpec],
    live: Iterable[int],
    settled: Iterable[int],
) -> dict[str, tuple[PartitionState, ...]]:
    """The partition state the controller should write next.

    Args:
        current: The state as last written.
        topics: Every live topic of the catalog.
        live: Brokers whose heartbeat is fresh.
        settled: Live brokers that have been alive long enough to take their preferred partitions back.

    Returns:
        A state for every partition of every topic. New topics and partitions get replicas; a partition
        whose leader is dead moves to its first live replica; a settled preferred replica leads again.
        A partition none of whose replicas lives keeps its last leader and an empty ISR (offline).
    """
    live_ids = sorted(set(live))
    alive = set(live_ids)
    back = set(settled) & alive
    out: dict[str, tuple[PartitionState, ...]] = {}
    for name, spec in sorted(topics.items()):
        states = list(current.get(name, ()))[: spec.partitions]
        if len(states) < spec.partitions and live_ids:
            rf = min(spec.replication_factor, len(live_ids))
            fresh = assign_replicas(name, range(len(states), spec.partitions), rf, live_ids)
            for p, replicas in zip(range(len(states), spec.partitions), fresh, strict=True):
                states.append(PartitionState(name, p, replicas[0], 0, replicas, replicas))
        out[name] = tuple(_elect(s, alive, back) for s in states)
    return out


def _elect(state: PartitionState, alive: set[int], settled: set[int]) -> PartitionState:
    isr = tuple(r for r in state.replicas if r in alive)
    leader = state.leader
    preferred = state.replicas[0]
    if preferred in settled and leader != preferred:
        leader = preferred
    elif leader not in alive and isr:
        leader = isr[0]
    epoch = state.leader_epoch + (1 if leader != state.leader else 0)
    if leader == state.leader and isr == state.isr:
        return state
    return replace(state, leader=leader, leader_epoch=epoch, isr=isr)


def coordinator_for(group: str, brokers: Sequence[int]) -> int:
    """The broker that coordinates a consumer group: rendezvous hashing over the live brokers, so a
    broker's death moves only its own groups. -1 when no broker is live."""
    best, best_weight = -1, -1
    for b in brokers:
        weight = zlib.crc32(f"{group}\x00{b}".encode())
        if weight > best_weight:
            best, best_weight = b, weight
    return best


def leader_counts(state: Mapping[str, Sequence[PartitionState]]) -> dict[int, int]:
    """How many partitions each broker leads."""
    counts: dict[int, int] = {}
    for states in state.values():
        for s in states:
            counts[s.leader] = counts.get(s.leader, 0) + 1
    return counts
