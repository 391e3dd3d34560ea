"""The rules of the group coordinator: generations, cooperative reconciliation, commit fencing, input checks.

Functions over :class:`~._state.Group` state, called with the coordinator's lock held.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Final

from topiclake.errors import IllegalGeneration, InvalidRequest, OffsetOutOfRange, RebalanceInProgress
from topiclake.platform.groups._state import Group, Member
from topiclake.platform.groups.assignors import MemberSpec, TopicPartition, assign
from topiclake.platform.groups.topic_view import TopicView

logger = logging.getLogger("topiclake.platform.groups.group_coordinator")

#: Kafka's ``offset.metadata.max.bytes``.
MAX_METADATA_BYTES: Final = 4096
_GROUP_ID = re.compile(r"[^\x00-\x1f]{1,255}")


def rebalance(
    group: Group, subs: Mapping[str, frozenset[str]], partitions: dict[str, int], reason: str
) -> None:
    """Start a new generation: run the assignor over the live members (see the coordinator's docs)."""
    previous = group.assignment
    group.generation += 1
    group.partitions = partitions
    if not group.members:
        group.assignment, group.target, group.leader = {}, {}, None
        logger.info("group %s: generation %d is empty (%s)", group.group_id, group.generation, reason)
        return
    assert group.assignor is not None
    specs = [
        MemberSpec(m.member_id, subs[m.member_id], tuple(group.target.get(m.member_id, ())), m.instance_id)
        for m in group.members.values()
    ]
    group.target = assign(group.assignor, specs, partitions)
    group.assignment = effective(group)
    if group.leader not in group.members:
        group.leader = next(iter(group.members))
    moved = sum(1 for m, tps in group.assignment.items() for tp in tps if tp not in previous.get(m, []))
    logger.info(
        "group %s: generation %d (%s): %d members, %d partitions, %d moved%s",
        group.group_id,
        group.generation,
        reason,
        len(group.members),
        sum(partitions.values()),
        moved,
        ", revocations pending" if group.pending else "",
    )


def effective(group: Group) -> dict[str, list[TopicPartition]]:
    """The target, minus (cooperative) partitions another member still holds."""
    if not group.cooperative:
        return {m: list(tps) for m, tps in group.target.items()}
    held: dict[TopicPartition, set[str]] = {}
    for m in group.members.values():
        for tp in {*m.owned, *m.told}:
            held.setdefault(tp, set()).add(m.member_id)
    return {m: [tp for tp in tps if not (held.get(tp, set()) - {m})] for m, tps in group.target.items()}


def reconcile(group: Group) -> None:
    """Cooperative: hand out withheld partitions once their previous owners have released them."""
    if not group.cooperative or not group.pending:
        return
    result = effective(group)
    if result != group.assignment:
        group.generation += 1
        group.assignment = result
        logger.info(
            "group %s: generation %d assigns revoked partitions%s",
            group.group_id,
            group.generation,
            ", more pending" if group.pending else "",
        )


def confirm(group: Group, member: Member, generation_id: int) -> None:
    if generation_id == member.told_generation:
        member.acked_generation, member.owned = generation_id, member.told
    elif generation_id not in (group.generation, member.acked_generation):
        raise IllegalGeneration(
            f"generation {generation_id} of member {member.member_id} in group {group.group_id} is "
            f"stale (current generation {group.generation}): join the group again",
            group=group.group_id,
            member_id=member.member_id,
            generation_id=generation_id,
            current_generation=group.generation,
        )


def tell(group: Group, member: Member) -> None:
    member.told_generation = group.generation
    member.told = tuple(group.assignment.get(member.member_id, ()))


def fence(group: Group, member: Member, generation_id: int, tps: list[TopicPartition]) -> None:
    if generation_id == group.generation:
        return
    if generation_id not in (member.acked_generation, member.told_generation):
        raise IllegalGeneration(
            f"commit with generation {generation_id} by member {member.member_id} of group "
            f"{group.group_id} is stale (current generation {group.generation}): join the group again",
            group=group.group_id,
            member_id=member.member_id,
            generation_id=generation_id,
            current_generation=group.generation,
        )
    held = member.told if generation_id == member.told_generation else member.owned
    for tp in tps:
        owner = group.owner(tp)
        if tp not in held or (owner is not None and owner != member.member_id):
            raise RebalanceInProgress(
                f"group {group.group_id} rebalanced (generation {group.generation}): partition "
                f"{tp[0]}-{tp[1]} no longer belongs to member {member.member_id}; heartbeat to learn "
                "the new assignment",
                group=group.group_id,
                member_id=member.member_id,
                generation_id=generation_id,
                current_generation=group.generation,
            )


def validate_offsets(
    broker: TopicView, offsets: Mapping[TopicPartition, tuple[int, str | None] | int]
) -> dict[TopicPartition, tuple[int, str]]:
    if not offsets:
        raise InvalidRequest("no offsets to commit")
    clean: dict[TopicPartition, tuple[int, str]] = {}
    for (topic, partition), spec in offsets.items():
        offset, metadata = (spec, "") if isinstance(spec, int) else (spec[0], spec[1] or "")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidRequest(
                f"offset of {topic}-{partition} must be a non-negative integer, got {offset!r}",
                topic=topic,
                partition=partition,
            )
        if len(metadata.encode()) > MAX_METADATA_BYTES:
            raise InvalidRequest(
                f"metadata of {topic}-{partition} is longer than {MAX_METADATA_BYTES} bytes",
                topic=topic,
                partition=partition,
            )
        end = broker.list_offsets(topic, partition, "latest")
        assert end is not None
        if offset > end:
            raise OffsetOutOfRange(
                f"cannot commit offset {offset} for {topic}-{partition}: beyond its end offset {end}",
                topic=topic,
                partition=partition,
                offset=offset,
                high_watermark=end,
            )
        clean[(topic, partition)] = (offset, metadata)
    return clean


def prior(group: Group, member: Member) -> tuple[TopicPartition, ...]:
    return tuple(group.target.get(member.member_id, ()))


def check_group_id(group_id: str) -> None:
    if not isinstance(group_id, str) or not _GROUP_ID.fullmatch(group_id):
        raise InvalidRequest(f"invalid group id {group_id!r}: 1-255 printable characters", group=group_id)


def parse_subscription(
    topics: Sequence[str] | None, pattern: str | None
) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    if (topics is None or len(topics) == 0) == (pattern is None):
        raise InvalidRequest("subscribe to a non-empty list of topics or to a pattern (exactly one)")
    if pattern is not None:
        try:
            return (), re.compile(pattern)
        except re.error as exc:
            raise InvalidRequest(f"invalid topic pattern {pattern!r}: {exc}") from exc
    assert topics is not None
    for t in topics:
        if not isinstance(t, str) or not t:
            raise InvalidRequest(f"invalid topic name {t!r} in the subscription")
    return tuple(sorted(set(topics))), None


def pattern_src(pattern: re.Pattern[str] | None) -> str | None:
    return None if pattern is None else pattern.pattern
