"""Consumer groups of Kafka's classic protocol: the join barrier, the leader's assignment, heartbeats.

The client's leader computes the assignment with its own assignor; the broker only relays opaque member
metadata and assignment bytes, as Kafka's GroupCoordinator does. State lives on the listener's event loop
(no locks). Committed offsets are not kept here: they go to the broker's
:class:`~topiclake.platform.groups.GroupCoordinator` and its offsets table, the same ones HTTP groups
use, and a group id is one namespace: a group that has HTTP members refuses Kafka members and
the other way round (:meth:`ClassicGroups.active` is the coordinator's ``foreign_groups`` hook).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field

from topiclake.kafka import errors as kerr

logger = logging.getLogger(__name__)

_EXPIRY_TICK_S = 0.25


class GroupError(Exception):
    """A request fenced or refused by the group's state; ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.code = code


@dataclass
class JoinAnswer:
    """What a JoinGroup returns once the barrier completes."""

    generation: int
    protocol: str | None
    protocol_type: str
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # leader only: (member id, instance id, metadata)


@dataclass(eq=False)
class ClassicMember:
    """One member of a classic group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    join: asyncio.Future[JoinAnswer] | None = None
    sync: asyncio.Future[bytes] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass(eq=False)
class ClassicGroup:
    """A classic group's state: Empty, PreparingRebalance, CompletingRebalance or Stable."""

    group_id: str
    protocol_type: str = ""
    protocol: str | None = None
    state: str = "Empty"
    generation: int = 0
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    deadline: asyncio.TimerHandle | None = None


class ClassicGroups:
    """All classic groups of one Kafka listener."""

    def __init__(self) -> None:
        self.groups: dict[str, ClassicGroup] = {}
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start expiring members whose session timed out."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def close(self) -> None:
        """Stop the expiry task and fail waiting requests."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for g in self.groups.values():
            for m in g.members.values():
                for fut in (m.join, m.sync):
                    if fut is not None and not fut.done():
                        fut.set_exception(GroupError(kerr.COORDINATOR_NOT_AVAILABLE))

    def active(self, group_id: str) -> bool:
        """Whether the group has members speaking the Kafka protocol (thread-safe read)."""
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    # ------------------------------------------------------------------ membership

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinAnswer:
        """JoinGroup: wait until every known member rejoined (or the rebalance timeout), then answer."""
        if not protocols:
            raise GroupError(kerr.INCONSISTENT_GROUP_PROTOCOL, "no protocols")
        if not 1 <= session_timeout_ms <= 1_800_000:
            raise GroupError(kerr.INVALID_SESSION_TIMEOUT)
        g = self.groups.setdefault(group_id, ClassicGroup(group_id))
        if g.members and g.protocol_type != protocol_type:
            raise GroupError(kerr.INCONSISTENT_GROUP_PROTOCOL, "protocol type differs")
        if g.members and not self._common(g, protocols):
            raise GroupError(kerr.INCONSISTENT_GROUP_PROTOCOL, "no protocol in common")
        member = g.members.get(member_id) if member_id else None
        if member_id and member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        if member is None and instance_id:
            old = next((m for m in g.members.values() if m.instance_id == instance_id), None)
            if old is not None:
                self._drop(g, old, "replaced by a member of the same instance id")
        if member is None:
            member = ClassicMember(
                f"{client_id}-{uuid.uuid4()}",
                instance_id,
                client_id,
                client_host,
                session_timeout_ms / 1000,
                max(rebalance_timeout_ms, session_timeout_ms) / 1000,
                protocols,
            )
            g.members[member.member_id] = member
            logger.info("kafka group %s: member %s joins", group_id, member.member_id)
        elif g.state in ("Stable", "CompletingRebalance") and member.protocols == protocols:
            member.last_heartbeat = time.monotonic()
            if member.member_id != g.leader or g.state == "CompletingRebalance":
                # an unchanged rejoin: the current generation, no rebalance (as Kafka answers it)
                listing = self._listing(g) if member.member_id == g.leader else []
                return JoinAnswer(
                    g.generation, g.protocol, g.protocol_type, g.leader or "", member.member_id, listing
                )
        logger.debug("kafka group %s: join of %s in state %s", group_id, member.member_id, g.state)
        member.protocols = protocols
        member.session_timeout_s = session_timeout_ms / 1000
        member.last_heartbeat = time.monotonic()
        g.protocol_type = protocol_type
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(kerr.UNKNOWN_MEMBER_ID, "superseded by a newer join"))
        member.join = asyncio.get_running_loop().create_future()
        fut = member.join
        if g.state != "PreparingRebalance":
            self._prepare(g, "join")
        self._maybe_complete(g)
        return await fut

    async def sync(
        self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]
    ) -> tuple[bytes, str | None, str]:
        """SyncGroup: the leader hands in the assignment; everyone gets their own bytes."""
        g, member = self._member(group_id, member_id)
        if generation != g.generation:
            raise GroupError(kerr.ILLEGAL_GENERATION)
        if g.state == "PreparingRebalance":
            raise GroupError(kerr.REBALANCE_IN_PROGRESS)
        if g.state == "Stable":
            return member.assignment, g.protocol, g.protocol_type
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result(m.assignment)
            g.state = "Stable"
            logger.info("kafka group %s: generation %d is stable", group_id, g.generation)
            return member.assignment, g.protocol, g.protocol_type
        member.sync = asyncio.get_running_loop().create_future()
        assignment = await member.sync
        return assignment, g.protocol, g.protocol_type

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        """Heartbeat: REBALANCE_IN_PROGRESS tells the member to rejoin."""
        g, member = self._member(group_id, member_id)
        member.last_heartbeat = time.monotonic()
        if g.state == "PreparingRebalance":
            raise GroupError(kerr.REBALANCE_IN_PROGRESS)
        if generation != g.generation:
            raise GroupError(kerr.ILLEGAL_GENERATION)

    def leave(self, group_id: str, member_id: str | None, instance_id: str | None) -> None:
        """LeaveGroup: the others rebalance."""
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        member = g.members.get(member_id or "")
        if member is None and instance_id:
            member = next((m for m in g.members.values() if m.instance_id == instance_id), None)
        if member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        self._drop(g, member, "left the group")
        self._after_removal(g, "leave")

    def check_commit(self, group_id: str, member_id: str, generation: int) -> None:
        """Fence an OffsetCommit: a simple commit (no member, generation -1) needs an empty group."""
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                raise GroupError(kerr.UNKNOWN_MEMBER_ID, "the group has members")
            return
        if g is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        _g, member = self._member(group_id, member_id)
        member.last_heartbeat = time.monotonic()
        if generation != g.generation:
            raise GroupError(kerr.ILLEGAL_GENERATION)
        if g.state == "CompletingRebalance":
            raise GroupError(kerr.REBALANCE_IN_PROGRESS)

    # ------------------------------------------------------------------ internals

    def _member(self, group_id: str, member_id: str) -> tuple[ClassicGroup, ClassicMember]:
        g = self.groups.get(group_id)
        member = g.members.get(member_id) if g is not None else None
        if g is None or member is None:
            raise GroupError(kerr.UNKNOWN_MEMBER_ID)
        return g, member

    @staticmethod
    def _common(g: ClassicGroup, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in g.members.values())

    def _prepare(self, g: ClassicGroup, reason: str) -> None:
        g.state = "PreparingRebalance"
        for m in g.members.values():  # followers waiting in SyncGroup must rejoin
            if m.sync is not None and not m.sync.done():
                m.sync.set_exception(GroupError(kerr.REBALANCE_IN_PROGRESS))
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=1.0)
        if g.deadline is not None:
            g.deadline.cancel()
        g.deadline = asyncio.get_running_loop().call_later(timeout, self._deadline, g)
        logger.info("kafka group %s: preparing a rebalance (%s)", g.group_id, reason)

    def _deadline(self, g: ClassicGroup) -> None:
        g.deadline = None
        if g.state != "PreparingRebalance":
            return
        for m in [m for m in g.members.values() if m.join is None or m.join.done()]:
            self._drop(g, m, "did not rejoin within the rebalance timeout")
        self._maybe_complete(g, force=True)

    def _maybe_complete(self, g: ClassicGroup, force: bool = False) -> None:
        waiting = [m for m in g.members.values() if m.join is not None and not m.join.done()]
        if not g.members:
            g.state = "Empty"
            return
        if len(waiting) < len(g.members) and not force:
            return
        if g.deadline is not None:
            g.deadline.cancel()
            g.deadline = None
        g.generation += 1
        first = next(iter(g.members.values()))
        counts: dict[str, int] = {}
        for m in g.members.values():
            for n, _ in m.protocols:
                if all(n in {x for x, _ in o.protocols} for o in g.members.values()):
                    counts[n] = counts.get(n, 0) + 1
        g.protocol = next((n for n, _ in first.protocols if n in counts), None)
        if g.leader not in g.members:
            g.leader = first.member_id
        assert g.leader is not None
        g.state = "CompletingRebalance"
        listing = self._listing(g)
        for m in waiting:
            answer = JoinAnswer(
                g.generation,
                g.protocol,
                g.protocol_type,
                g.leader,
                m.member_id,
                listing if m.member_id == g.leader else [],
            )
            assert m.join is not None
            m.join.set_result(answer)
            m.last_heartbeat = time.monotonic()
        logger.info(
            "kafka group %s: generation %d with %d members, leader %s, protocol %s",
            g.group_id,
            g.generation,
            len(g.members),
            g.leader,
            g.protocol,
        )

    @staticmethod
    def _listing(g: ClassicGroup) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values()]

    def _drop(self, g: ClassicGroup, m: ClassicMember, reason: str) -> None:
        g.members.pop(m.member_id, None)
        for fut in (m.join, m.sync):
            if fut is not None and not fut.done():
                fut.set_exception(GroupError(kerr.UNKNOWN_MEMBER_ID))
        if g.leader == m.member_id:
            g.leader = None
        logger.info("kafka group %s: member %s %s", g.group_id, m.member_id, reason)

    def _after_removal(self, g: ClassicGroup, reason: str) -> None:
        if not g.members:
            g.state = "Empty"
            g.leader = None
            if g.deadline is not None:
                g.deadline.cancel()
                g.deadline = None
            return
        if g.state != "PreparingRebalance":
            self._prepare(g, reason)
        self._maybe_complete(g)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(_EXPIRY_TICK_S)
            try:
                self._expire(time.monotonic())
            except Exception:  # the reaper must outlive any one bad group state
                logger.exception("kafka groups: expiry pass failed")

    def _expire(self, now: float) -> None:
        for g in list(self.groups.values()):
            expired = [
                m
                for m in g.members.values()
                if (m.join is None or m.join.done()) and now - m.last_heartbeat > m.session_timeout_s
            ]
            for m in expired:
                self._drop(g, m, "expired (no heartbeat within its session timeout)")
            if expired:
                self._after_removal(g, "expiry")
