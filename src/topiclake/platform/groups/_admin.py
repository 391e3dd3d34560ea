"""Offset administration of consumer groups: lag, starting positions and offset resets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topiclake.errors import (
    GroupNotFound,
    InvalidRequest,
    NoOffsetForPartition,
    OffsetOutOfRange,
    PartitionNotFound,
)
from topiclake.platform.groups._state import PartitionLag, ResetPlanEntry
from topiclake.platform.groups.assignors import TopicPartition
from topiclake.platform.groups.offsets_store import CommittedOffset, OffsetsStore
from topiclake.platform.groups.topic_view import TopicView

_RESETS = ("earliest", "latest", "offset", "timestamp", "shift")


def _ends(broker: TopicView, topic: str, partition: int) -> tuple[int, int]:
    start = broker.list_offsets(topic, partition, "earliest")
    end = broker.list_offsets(topic, partition, "latest")
    assert start is not None and end is not None
    return start, end


def lag(
    broker: TopicView,
    committed: Mapping[TopicPartition, CommittedOffset],
    owners: Mapping[TopicPartition, str],
    topic: str | None,
) -> list[PartitionLag]:
    """Lag of every partition with a committed offset or an owner (of ``topic`` only, if given)."""
    existing = {t.name for t in broker.list_topics()}
    tps = sorted({*committed, *owners})
    rows = []
    for t, p in tps:
        if (topic is not None and t != topic) or t not in existing:
            continue
        try:
            start, end = _ends(broker, t, p)
        except PartitionNotFound:
            continue
        c = committed.get((t, p))
        value = end - c.offset if c is not None else end - start
        rows.append(
            PartitionLag(
                topic=t,
                partition=p,
                committed_offset=c.offset if c is not None else None,
                log_start_offset=start,
                end_offset=end,
                lag=max(0, value),
                estimated=c is None,
                member_id=owners.get((t, p)),
            )
        )
    return rows


def resolve_position(
    broker: TopicView, store: OffsetsStore, group_id: str, topic: str, partition: int, reset: str
) -> int:
    """The committed offset if within [log start, end], else per ``auto.offset.reset``."""
    if reset not in ("earliest", "latest", "none"):
        raise InvalidRequest(f"auto.offset.reset must be earliest, latest or none, not {reset!r}")
    start, end = _ends(broker, topic, partition)
    c = store.get(group_id, topic, partition)
    if c is not None and start <= c.offset <= end:
        return c.offset
    if reset == "earliest":
        return start
    if reset == "latest":
        return end
    if c is None:
        raise NoOffsetForPartition(
            f"group {group_id} has no committed offset for {topic}-{partition} and auto.offset.reset is none",
            group=group_id,
            topic=topic,
            partition=partition,
        )
    raise OffsetOutOfRange(
        f"committed offset {c.offset} of group {group_id} is out of range [{start}, {end}] for "
        f"{topic}-{partition} and auto.offset.reset is none",
        group=group_id,
        topic=topic,
        partition=partition,
        offset=c.offset,
        log_start_offset=start,
        high_watermark=end,
    )


def reset_plan(
    broker: TopicView,
    group_id: str,
    committed: Mapping[TopicPartition, CommittedOffset],
    to: str,
    value: int | None,
    topics: Sequence[str] | None,
    partitions: Sequence[TopicPartition] | None,
) -> list[ResetPlanEntry]:
    """The new committed offset of every partition in scope, clamped to [log start, end]."""
    if to not in _RESETS:
        raise InvalidRequest(f"reset to must be one of {', '.join(_RESETS)}, not {to!r}")
    needs_value = to in ("offset", "timestamp", "shift")
    if needs_value and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidRequest(f"reset to {to} needs an integer value")
    if to in ("offset", "timestamp") and value is not None and value < 0:
        raise InvalidRequest(f"reset to {to} needs a non-negative value, got {value}")
    scope: set[TopicPartition] = set()
    for t, p in partitions or ():
        info = broker.describe_topic(t)
        if not 0 <= p < info.partitions:
            raise PartitionNotFound(f"topic {t} has no partition {p}", topic=t, partition=p)
        scope.add((t, p))
    for t in topics or ():
        scope.update((t, p) for p in range(broker.describe_topic(t).partitions))
    if partitions is None and topics is None:
        if not committed:
            raise GroupNotFound(
                f"group {group_id!r} has no committed offsets: name the topics or partitions to reset",
                group=group_id,
            )
        existing = {t.name for t in broker.list_topics()}
        scope = {tp for tp in committed if tp[0] in existing}
    plan = []
    for t, p in sorted(scope):
        start, end = _ends(broker, t, p)
        c = committed.get((t, p))
        current = c.offset if c is not None else None
        if to == "earliest":
            new = start
        elif to == "latest":
            new = end
        elif to == "offset":
            assert value is not None
            new = value
        elif to == "timestamp":
            assert value is not None
            found = broker.list_offsets(t, p, value)
            new = end if found is None else found
        else:
            if current is None:
                raise InvalidRequest(
                    f"cannot shift the offset of {t}-{p} for group {group_id}: nothing is committed",
                    topic=t,
                    partition=p,
                )
            assert value is not None
            new = current + value
        plan.append(ResetPlanEntry(t, p, current, min(max(new, start), end)))
    return plan
