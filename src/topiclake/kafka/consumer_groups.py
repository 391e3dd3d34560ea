"""Consumer groups of Kafka's next-generation protocol (KIP-848): the broker assigns, members reconcile.

A member sends ConsumerGroupHeartbeat with its subscription, member epoch and the partitions it owns; the
coordinator keeps a *group epoch* (bumped by every membership, subscription or partition-count change), a
*target assignment* computed by a server-side assignor (``uniform``: balanced and sticky; ``range``:
Kafka's range) at that epoch, and moves each member towards its target one heartbeat at a time:

- partitions to give up are *revoked first*: the member keeps its epoch and the partitions it keeps until
  a heartbeat reports that it no longer owns the revoked ones;
- then it gets the target epoch and the partitions of its target that no other member still owns; the
  others (*unreleased*) are added on a later heartbeat, once their previous owner let them go.

So a partition is never owned by two members. A member that does not give up revoked partitions within
its rebalance timeout, or that stops heartbeating for the session timeout, is fenced and its partitions
released. A static member (``group.instance.id``) that leaves with epoch -2 keeps its assignment for the
session timeout; one joining with the same instance id takes its place, assignment and epoch.

State lives on the listener's event loop, as :mod:`topiclake.kafka.classic_groups` does; committed offsets
go to the broker's coordinator and its offsets table, fenced by the member epoch (:meth:`check_commit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from topiclake.kafka import errors as kerr
from topiclake.kafka.classic_groups import GroupError
from topiclake.platform.groups.assignors import MemberSpec, TopicPartition, range_assign, sticky_assign

logger = logging.getLogger(__name__)

#: Server-side assignors (``group.remote.assignor``), the first is the default (Kafka's).
ASSIGNORS = ("uniform", "range")
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113

Owned = frozenset[TopicPartition]


@dataclass(eq=False)
class ConsumerMember:
    """One member of a consumer group, as the coordinator reconciles it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack_id: str | None
    rebalance_timeout_s: float
    topics: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Owned = frozenset()
    revoking: Owned = frozenset()
    revoking_since: float = 0.0
    sent: Owned | None = None
    last_heartbeat: float = field(default_factory=time.monotonic)
    left_static: bool = False

    def subscribed(self, names: list[str]) -> set[str]:
        """The topics of ``names`` this member subscribes to (by name or regex)."""
        out = {t for t in self.topics if t in names}
        if self.regex:
            pattern = re.compile(self.regex)
            out |= {t for t in names if pattern.fullmatch(t)}
        return out


@dataclass(eq=False)
class ConsumerGroup:
    """A consumer group's epochs, members and target assignment."""

    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    target: dict[str, Owned] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)  # subscribed topic -> count, at the epoch
    assignor: str = ASSIGNORS[0]
    base: int = 0  # the epoch before the request being processed: one request bumps it at most once

    def bump(self) -> None:
        """A membership, subscription or metadata change: the next group epoch (once per request)."""
        self.epoch = self.base + 1

    @property
    def state(self) -> str:
        """Empty, Assigning (target not computed), Reconciling (members moving) or Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.revoking for m in self.members.values()):
            return "Reconciling"
        return "Stable"


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields (None: unchanged since the last one)."""

    member_id: str
    epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: Owned | None = None
    client_id: str = ""
    client_host: str = ""


class ConsumerGroups:
    """All KIP-848 consumer groups of one Kafka listener.

    Args:
        session_timeout_ms: ``group.consumer.session.timeout.ms``.
        heartbeat_interval_ms: ``group.consumer.heartbeat.interval.ms``, told to every member.
    """

    def __init__(self, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        self.session_timeout_s = session_timeout_ms / 1000
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start expiring members (session and rebalance timeouts) on the running loop."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def close(self) -> None:
        """Stop the expiry task."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            try:
                self.expire(time.monotonic())
            except Exception:  # the reaper must outlive any one bad group state
                logger.exception("consumer groups: expiry pass failed")

    def active(self, group_id: str) -> bool:
        """Whether the group has members of this protocol."""
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(
        self, group_id: str, hb: Heartbeat, topics: Mapping[str, int]
    ) -> tuple[ConsumerMember, Owned | None]:
        """Process one heartbeat against ``topics`` (every topic's partition count); return the member
        and the assignment to send (None: unchanged since the last one sent).

        Raises:
            GroupError: Unknown member, fenced epoch, unreleased instance id, unsupported assignor.
        """
        now = time.monotonic()
        if hb.assignor is not None and hb.assignor not in ASSIGNORS:
            raise GroupError(UNSUPPORTED_ASSIGNOR, f"assignor {hb.assignor} (supported: {ASSIGNORS})")
        g = self.groups.setdefault(group_id, ConsumerGroup(group_id))
        self.expire(now)
        g.base = g.epoch
        if hb.epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = self._leave(g, hb)
            return member, None
        member = self._member(g, hb, now)
        member.last_heartbeat = now
        if self._update(member, hb):
            g.bump()
        self._refresh_partitions(g, topics)
        if g.assignment_epoch < g.epoch:
            self._assign(g)
        if hb.owned is not None and member.revoking and not (hb.owned & member.revoking):
            member.revoking = frozenset()  # the member confirmed the revocation
        self._reconcile(g, member, now)  # a member's epoch only moves in its own heartbeat, as in Kafka
        send = member.assigned if (hb.epoch == 0 or member.sent != member.assigned) else None
        if hb.owned is not None and hb.owned != member.assigned:
            send = member.assigned
        member.sent = member.assigned
        return member, send

    def _leave(self, g: ConsumerGroup, hb: Heartbeat) -> ConsumerMember:
        member = g.members.get(hb.member_id)
        if member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        if hb.epoch == STATIC_LEAVE_EPOCH and member.instance_id:
            member.left_static = True  # keeps its partitions for the session timeout
            logger.info("consumer group %s: static member %s left for now", g.group_id, member.instance_id)
        else:
            self._remove(g, member, "left the group")
        member.epoch = hb.epoch
        return member

    def _member(self, g: ConsumerGroup, hb: Heartbeat, now: float) -> ConsumerMember:
        if hb.epoch == 0:
            return self._join(g, hb, now)
        member = g.members.get(hb.member_id)
        if member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID, f"member {hb.member_id} is not in the group")
        if hb.epoch != member.epoch and not (hb.epoch == member.previous_epoch and hb.owned is not None):
            raise GroupError(FENCED_MEMBER_EPOCH, f"epoch {hb.epoch}, the member's is {member.epoch}")
        return member

    def _join(self, g: ConsumerGroup, hb: Heartbeat, now: float) -> ConsumerMember:
        member_id = hb.member_id or str(uuid.uuid4())
        old = g.members.get(member_id)
        if old is not None:  # rejoining with epoch 0: it gave up everything it owned
            self._remove(g, old, "rejoined")
        timeout = hb.rebalance_timeout_ms / 1000 if hb.rebalance_timeout_ms > 0 else 300.0
        member = ConsumerMember(
            member_id, hb.instance_id, hb.client_id, hb.client_host, hb.rack_id, timeout, last_heartbeat=now
        )
        static = next(
            (m for m in g.members.values() if hb.instance_id and m.instance_id == hb.instance_id), None
        )
        if static is not None:
            if not static.left_static:
                raise GroupError(UNRELEASED_INSTANCE_ID, f"instance {hb.instance_id} is still in the group")
            g.members.pop(static.member_id)  # takes its place: same assignment and epoch, no rebalance
            member.topics, member.regex, member.assignor = static.topics, static.regex, static.assignor
            member.epoch, member.previous_epoch = static.epoch, static.previous_epoch
            member.assigned, member.revoking = static.assigned, static.revoking
            if static.member_id in g.target:
                g.target[member_id] = g.target.pop(static.member_id)
            logger.info(
                "consumer group %s: %s replaces static member %s", g.group_id, member_id, static.member_id
            )
        else:
            g.bump()
            logger.info("consumer group %s: member %s joined (epoch %d)", g.group_id, member_id, g.epoch)
        g.members[member_id] = member
        return member

    @staticmethod
    def _update(member: ConsumerMember, hb: Heartbeat) -> bool:
        changed = False
        if hb.topics is not None and tuple(sorted(hb.topics)) != member.topics:
            member.topics, changed = tuple(sorted(hb.topics)), True
        if hb.regex is not None and (hb.regex or None) != member.regex:
            member.regex, changed = hb.regex or None, True
        if hb.assignor is not None and hb.assignor != member.assignor:
            member.assignor, changed = hb.assignor, True
        if hb.rebalance_timeout_ms > 0:
            member.rebalance_timeout_s = hb.rebalance_timeout_ms / 1000
        return changed

    @staticmethod
    def _refresh_partitions(g: ConsumerGroup, topics: Mapping[str, int]) -> None:
        names = sorted(topics)
        wanted: set[str] = set()
        for m in g.members.values():
            wanted |= m.subscribed(names)
        now = {t: topics[t] for t in sorted(wanted)}
        if now != g.partitions:
            g.partitions = now
            g.bump()

    def _assign(self, g: ConsumerGroup) -> None:
        names = list(g.partitions)
        chosen = [m.assignor for m in g.members.values() if m.assignor]
        g.assignor = max(set(chosen), key=chosen.count) if chosen else ASSIGNORS[0]
        specs = [
            MemberSpec(m.member_id, frozenset(m.subscribed(names)), tuple(sorted(m.assigned)), m.instance_id)
            for m in g.members.values()
        ]
        run = sticky_assign if g.assignor == "uniform" else range_assign
        result = run(specs, g.partitions)
        g.target = {m: frozenset(tps) for m, tps in result.items()}
        g.assignment_epoch = g.epoch
        logger.info("consumer group %s: target assignment at epoch %d (%s)", g.group_id, g.epoch, g.assignor)

    @staticmethod
    def _owned_by_others(g: ConsumerGroup, member: ConsumerMember) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for m in g.members.values():
            if m is not member:
                out |= m.assigned | m.revoking
        return out

    def _reconcile(self, g: ConsumerGroup, member: ConsumerMember, now: float) -> None:
        """Move ``member`` towards its target: revoke first, then the target epoch and free partitions."""
        if member.revoking:
            return  # waits for the member to confirm
        target = g.target.get(member.member_id, frozenset())
        lost = member.assigned - target
        if lost:
            member.assigned, member.revoking, member.revoking_since = member.assigned & target, lost, now
            return
        if member.epoch != g.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, g.assignment_epoch
        free = target - member.assigned - self._owned_by_others(g, member)
        if free:
            member.assigned = member.assigned | free

    # ------------------------------------------------------------------ commits, expiry

    def check_commit(self, group_id: str, member_id: str, epoch: int) -> None:
        """Fence an OffsetCommit of a consumer-protocol member: its current (or just previous) epoch.

        Raises:
            GroupError: Unknown member, or STALE_MEMBER_EPOCH.
        """
        g = self.groups.get(group_id)
        member = g.members.get(member_id) if g is not None else None
        if member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        if epoch not in (member.epoch, member.previous_epoch) or epoch > member.epoch:
            raise GroupError(STALE_MEMBER_EPOCH, f"epoch {epoch}, the member's is {member.epoch}")

    def expire(self, now: float) -> None:
        """Fence members whose session timed out or who held revoked partitions past the rebalance
        timeout; a static member that left temporarily goes after the session timeout."""
        for g in list(self.groups.values()):
            for m in list(g.members.values()):
                g.base = g.epoch
                if now - m.last_heartbeat > self.session_timeout_s:
                    self._remove(g, m, "expired (no heartbeat within the session timeout)")
                elif m.revoking and now - m.revoking_since > m.rebalance_timeout_s:
                    self._remove(g, m, "fenced (did not revoke within its rebalance timeout)")

    def _remove(self, g: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        if g.members.pop(member.member_id, None) is None:
            return
        g.target.pop(member.member_id, None)
        g.bump()
        logger.info(
            "consumer group %s: member %s %s (epoch %d)", g.group_id, member.member_id, reason, g.epoch
        )
