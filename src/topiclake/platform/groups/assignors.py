"""Partition assignors of consumer groups: Kafka's range, round-robin and sticky strategies.

Pure functions of the members (with their subscribed topics and what they owned before) and the partitions
of the subscribed topics. The coordinator runs them server-side; each partition goes to exactly one member
subscribed to its topic, and members beyond the number of partitions get nothing.

Members are ordered by ``group.instance.id`` when they have one, else by member id, as Kafka's assignors
do, so a static member keeps its place in range and round-robin orders across restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]

#: The assignors a member may ask for (Kafka's ``partition.assignment.strategy`` names).
ASSIGNORS: Final = ("range", "roundrobin", "sticky", "cooperative-sticky")

#: Assignors that revoke before they assign (a moved partition is withheld for one generation).
COOPERATIVE: Final = frozenset({"cooperative-sticky"})


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor needs to know about a member.

    Attributes:
        member_id: The member's id.
        topics: The topics it subscribes to (already resolved from a pattern).
        owned: The partitions it owned in the previous generation (sticky assignors keep them).
        instance_id: Its ``group.instance.id``, if static.
    """

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...] = ()
    instance_id: str | None = None
    sort_key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sort_key", self.instance_id or self.member_id)


def _ordered(members: Sequence[MemberSpec]) -> list[MemberSpec]:
    return sorted(members, key=lambda m: (m.sort_key, m.member_id))


def _empty(members: Sequence[MemberSpec]) -> Assignment:
    return {m.member_id: [] for m in members}


def range_assign(members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RangeAssignor: per topic, consecutive ranges of partitions to its subscribers in order;
    the first ``partitions % subscribers`` members get one more."""
    result = _empty(members)
    ordered = _ordered(members)
    for topic in sorted(partitions):
        subs = [m for m in ordered if topic in m.topics]
        if not subs:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            result[m.member_id].extend((topic, p) for p in range(start, start + count))
            start += count
    return result


def roundrobin_assign(members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RoundRobinAssignor: all partitions in (topic, partition) order dealt to the members in turn,
    skipping members not subscribed to the partition's topic."""
    result = _empty(members)
    ordered = _ordered(members)
    if not ordered:
        return result
    i = 0
    for topic in sorted(partitions):
        subs = [m for m in ordered if topic in m.topics]
        if not subs:
            continue
        for p in range(partitions[topic]):
            while topic not in ordered[i % len(ordered)].topics:
                i += 1
            result[ordered[i % len(ordered)].member_id].append((topic, p))
            i += 1
    return result


def sticky_assign(members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's StickyAssignor: as balanced as round-robin, moving as few partitions as possible.

    Members keep the partitions they owned (if still subscribed and not claimed twice); the rest go to the
    least loaded subscriber; then partitions move one at a time from the most to the least loaded member
    that can take them until no move improves the balance.
    """
    ordered = _ordered(members)
    result = _empty(members)
    valid = {(t, p) for t, n in partitions.items() for p in range(n)}
    taken: set[TopicPartition] = set()
    for m in ordered:
        for tp in m.owned:
            if tp in valid and tp[0] in m.topics and tp not in taken:
                taken.add(tp)
                result[m.member_id].append(tp)
    by_id = {m.member_id: m for m in ordered}

    def least_loaded(tp: TopicPartition) -> str | None:
        subs = [m for m in ordered if tp[0] in m.topics]
        if not subs:
            return None
        return min(subs, key=lambda m: (len(result[m.member_id]), m.sort_key)).member_id

    for tp in sorted(valid - taken):
        owner = least_loaded(tp)
        if owner is not None:
            result[owner].append(tp)
    # Balance: move from the most loaded member to a less loaded one that subscribes to the topic.
    for _ in range(len(valid) * max(1, len(ordered))):
        if not _move_one(result, by_id):
            break
    return {member: sorted(tps) for member, tps in result.items()}


def _move_one(result: Assignment, members: Mapping[str, MemberSpec]) -> bool:
    donors = sorted(result, key=lambda m: (-len(result[m]), members[m].sort_key))
    for donor in donors:
        for tp in sorted(result[donor], reverse=True):  # give away the newest-looking partitions first
            takers = [
                m
                for m in result
                if m != donor and tp[0] in members[m].topics and len(result[m]) + 1 < len(result[donor])
            ]
            if takers:
                taker = min(takers, key=lambda m: (len(result[m]), members[m].sort_key))
                result[donor].remove(tp)
                result[taker].append(tp)
                return True
    return False


_STRATEGIES: Final[dict[str, Callable[[Sequence[MemberSpec], Mapping[str, int]], Assignment]]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": sticky_assign,
}


def assign(strategy: str, members: Sequence[MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Run the named assignor (one of :data:`ASSIGNORS`); every member gets a sorted list, maybe empty.

    Raises:
        KeyError: Unknown strategy (the coordinator validates names before).
    """
    result = _STRATEGIES[strategy](members, partitions)
    return {member: sorted(tps) for member, tps in result.items()}
