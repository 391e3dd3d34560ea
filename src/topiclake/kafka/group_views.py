"""The Kafka listener's groups as the platform describes groups (:class:`GroupDescription`), so the REST
API, the console and the CLI show classic and consumer-protocol (KIP-848) groups beside HTTP ones.

Read from HTTP threads while the listener's loop changes the groups: every collection is copied first, and
a description is a snapshot (as Kafka's own DescribeGroups is).
"""

from __future__ import annotations

import struct
import time

from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.serial import entity_reader

from topiclake.kafka.classic_groups import ClassicGroup, ClassicGroups
from topiclake.kafka.consumer_groups import ConsumerGroup, ConsumerGroups
from topiclake.platform.groups.group_coordinator import GroupDescription, MemberDescription

_read_assignment = entity_reader(ConsumerProtocolAssignment)


def _classic_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions in a classic ``consumer`` assignment (version, then v0-v3's common fields)."""
    if len(data) < 2:
        return []
    try:
        body, _n = _read_assignment(data, struct.calcsize(">h"))
    except Exception:  # a client's bytes: not ours to trust; shown as no partitions
        return []
    return sorted((str(t.topic), int(p)) for t in body.assigned_partitions for p in t.partitions)


def _classic(g: ClassicGroup, now: float) -> GroupDescription:
    members = [
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            subscription=[],
            pattern=None,
            assignment=_classic_assignment(m.assignment),
            generation_id=g.generation,
            session_timeout_ms=int(m.session_timeout_s * 1000),
            max_poll_interval_ms=int(m.rebalance_timeout_s * 1000),
            last_heartbeat_ms_ago=int((now - m.last_heartbeat) * 1000),
        )
        for m in list(g.members.values())
    ]
    return GroupDescription(g.group_id, g.state, g.generation, g.protocol, g.leader, members, "classic")


def _consumer(g: ConsumerGroup, now: float, session_ms: int) -> GroupDescription:
    members = [
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            subscription=list(m.topics),
            pattern=m.regex,
            assignment=sorted(m.assigned),
            generation_id=m.epoch,
            session_timeout_ms=session_ms,
            max_poll_interval_ms=int(m.rebalance_timeout_s * 1000),
            last_heartbeat_ms_ago=int((now - m.last_heartbeat) * 1000),
        )
        for m in list(g.members.values())
    ]
    return GroupDescription(g.group_id, g.state, g.epoch, g.assignor, None, members, "consumer")


def describe(
    classic: ClassicGroups, consumer: ConsumerGroups, group_id: str | None
) -> list[GroupDescription]:
    """The listener's groups with members: all of them, or the one named (an empty list if it has none)."""
    now = time.monotonic()
    session_ms = int(consumer.session_timeout_s * 1000)
    out = []
    for cg in list(classic.groups.values()):
        if cg.members and group_id in (None, cg.group_id):
            out.append(_classic(cg, now))
    for kg in list(consumer.groups.values()):
        if kg.members and group_id in (None, kg.group_id):
            out.append(_consumer(kg, now, session_ms))
    return out
