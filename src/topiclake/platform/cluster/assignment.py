"""What the controller decides, as pure functions: replica assignment and leader election.

Replica assignment follows Kafka's (``AdminUtils.assignReplicasToBrokers``): the first replica of
partition ``p`` is broker ``(p + start) % n`` of the sorted live brokers, the others follow at a shift that
grows after each round, so leaders and replicas spread evenly. When every live broker has a rack, the
brokers are first arranged alternating between racks and a follower is skipped while its rack already
holds a replica and some rack holds none (Kafka's rack-aware mode), so replicas spread over racks.
Election keeps a live leader, moves a dead leader's partition to the first live replica (leader epoch + 1),
and gives leadership back to the preferred (first) replica once it has been alive for a while.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from topiclake.errors import InvalidReplicationFactor
from topiclake.platform.cluster.metadata import PartitionState


def assign_replicas(
    topic: str,
    partitions: range,
    replication_factor: int,
    brokers: Sequence[int],
    racks: Mapping[int, str | None] | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``partitions`` of a topic over ``brokers``.

    Args:
        racks: Each broker's rack; rack-aware only when every broker in ``brokers`` has one (Kafka refuses
            a mix, topiclake then assigns as if no broker had one).

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
    rack_of = {b: (racks or {}).get(b) for b in ids}
    if all(r is not None for r in rack_of.values()) and len(set(rack_of.values())) > 1:
        return _rack_aware(partitions, replication_factor, rack_of, start, shift0)
    out: list[tuple[int, ...]] = []
    for p in partitions:
        first = (p + start) % n
        shift = shift0 + p // n
        replicas = [ids[first]]
        for j in range(1, replication_factor):
            replicas.append(ids[_follower(first, shift, j - 1, n)])
        out.append(tuple(replicas))
    return out


def _follower(first: int, shift: int, k: int, n: int) -> int:
    return (first + 1 + (shift + k) % (n - 1)) % n


def _rack_alternated(rack_of: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack): a, b, a, b, ..."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(rack_of):
        by_rack.setdefault(str(rack_of[b]), []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(rack_of):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


def _rack_aware(
    partitions: range, rf: int, rack_of: Mapping[int, str | None], start: int, shift0: int
) -> list[tuple[int, ...]]:
    arranged = _rack_alternated(rack_of)
    n = len(arranged)
    n_racks = len(set(rack_of.values()))
    out: list[tuple[int, ...]] = []
    for p in partitions:
        first = (p + start) % n
        shift = shift0 + p // n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        k = 0
        while len(replicas) < rf:
            broker = arranged[_follower(first, shift * n_racks, k, n)]
            k += 1
            rack = rack_of[broker]
            rack_ok = rack not in racks_used or len(racks_used) == n_racks
            if rack_ok and broker not in replicas:
                replicas.append(broker)
                racks_used.add(rack)
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
    racks: Mapping[int, str | None] | None = None,
) -> dict[str, tuple[PartitionState, ...]]:
    """The partition state the controller should write next.

    Args:
        current: The state as last written.
        topics: Every live topic of the catalog.
        live: Brokers whose heartbeat is fresh.
        settled: Live brokers that have been alive long enough to take their preferred partitions back.
        racks: Each live broker's rack (rack-aware assignment when every one has a rack).

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
            fresh = assign_replicas(name, range(len(states), spec.partitions), rf, live_ids, racks)
            for p, replicas in zip(range(len(states), spec.partitions), fresh, strict=True):
                states.append(PartitionState(name, p, replicas[0], 0, replicas, replicas))
        want = min(spec.replication_factor, len(live_ids))
        states = [_grown(s, want, live_ids, racks) if len(s.replicas) < want else s for s in states]
        out[name] = tuple(_elect(s, alive, back) for s in states)
    return out


def _grown(
    state: PartitionState, want: int, live_ids: Sequence[int], racks: Mapping[int, str | None] | None
) -> PartitionState:
    """``state`` with live brokers appended to its replicas up to ``want``: a partition placed while the
    controller saw fewer live brokers than its replication factor (a broker just back, a view that
    lagged) gets its factor once they are live. The preferred leader stays first; new followers are
    spread by partition and taken from racks the partition is not on yet, when brokers have racks."""
    extra = [b for b in live_ids if b not in state.replicas]
    if not extra:
        return state
    k = state.partition % len(extra)
    extra = extra[k:] + extra[:k]
    if racks:
        present = {racks.get(r) for r in state.replicas}
        extra.sort(key=lambda b: racks.get(b) in present)  # stable: unrepresented racks first
    return replace(state, replicas=state.replicas + tuple(extra[: want - len(state.replicas)]))


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
