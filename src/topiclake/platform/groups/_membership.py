"""Consumer group membership: join, sync, heartbeat, leave, poll deadlines, expiry and rebalances.

The membership half of :class:`~.group_coordinator.GroupCoordinator` (split from that
module, whose docstring tells the protocol); commits and the admin API stay there.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from topiclake.errors import InconsistentGroupProtocol, InvalidRequest, UnknownMemberId
from topiclake.platform.groups import _rules as rules
from topiclake.platform.groups._base import GroupBase
from topiclake.platform.groups._state import Group, HeartbeatResult, JoinResult, Member
from topiclake.platform.groups.assignors import ASSIGNORS

logger = logging.getLogger("topiclake.platform.groups.group_coordinator")  # one logger for all parts


class GroupMembership(GroupBase):
    """Members joining, heartbeating and leaving; the rebalances that follow."""

    # ------------------------------------------------------------------ membership

    def join(
        self,
        group_id: str,
        member_id: str | None = None,
        *,
        topics: Sequence[str] | None = None,
        pattern: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "consumer",
        session_timeout_ms: int = 45_000,
        max_poll_interval_ms: int = 300_000,
        assignor: str = "range",
    ) -> JoinResult:
        """Join a group (or rejoin with a known ``member_id``), subscribing to ``topics`` or a ``pattern``.

        A new member, a changed subscription or an expired member starts a new generation. A member
        joining with the ``group_instance_id`` of a live member replaces it without a rebalance.

        Raises:
            InvalidRequest: Bad group id, subscription, timeouts or assignor name.
            InconsistentGroupProtocol: The group's members use another assignor.
            UnknownMemberId: ``member_id`` is not in the group (join again without one).
        """
        rules.check_group_id(group_id)
        subscription = rules.parse_subscription(topics, pattern)
        if assignor not in ASSIGNORS:
            raise InvalidRequest(f"unknown assignor {assignor!r}: use one of {', '.join(ASSIGNORS)}")
        if not self._min_session <= session_timeout_ms <= self._max_session:
            raise InvalidRequest(
                f"session.timeout.ms must be between {self._min_session} and {self._max_session}, "
                f"got {session_timeout_ms}"
            )
        if max_poll_interval_ms < 1:
            raise InvalidRequest(f"max.poll.interval.ms must be positive, got {max_poll_interval_ms}")
        self._check_foreign(group_id)
        now = time.monotonic()
        if group_id not in self._groups:
            # a group new to this coordinator may have moved here from another broker of the cluster:
            # read the offsets its members committed there
            self.store.refresh()
        with self._lock:
            group = self._groups.setdefault(group_id, Group(group_id))
            self._expire(group, now)
            if group.members and group.assignor != assignor:
                raise InconsistentGroupProtocol(
                    f"group {group_id} uses the {group.assignor} assignor; this member asks for {assignor}",
                    group=group_id,
                )
            topics_t, regex = subscription
            member = group.members.get(member_id) if member_id else None
            if member_id and member is None:
                raise UnknownMemberId(
                    f"member {member_id} is not in group {group_id} (its session may have expired): "
                    "join again without a member id",
                    group=group_id,
                    member_id=member_id,
                )
            if member is None and group_instance_id and group_instance_id in group.instances:
                member = self._replace_static(group, group.instances[group_instance_id], client_id)
            rebalance = False
            if member is None:
                member = Member(
                    member_id=f"{client_id}-{uuid.uuid4()}",
                    instance_id=group_instance_id,
                    client_id=client_id,
                    topics=topics_t,
                    pattern=regex,
                    session_timeout_s=session_timeout_ms / 1000,
                    max_poll_s=max_poll_interval_ms / 1000,
                    last_heartbeat=now,
                    last_poll=now,
                )
                group.members[member.member_id] = member
                if group_instance_id:
                    group.instances[group_instance_id] = member.member_id
                group.leader = group.leader if group.leader in group.members else member.member_id
                rebalance = True
                logger.info("group %s: member %s joins", group_id, member.member_id)
            else:
                same = member.topics == topics_t and rules.pattern_src(member.pattern) == rules.pattern_src(
                    regex
                )
                rebalance = not same
                member.topics, member.pattern = topics_t, regex
                member.session_timeout_s = session_timeout_ms / 1000
                member.max_poll_s = max_poll_interval_ms / 1000
                member.last_heartbeat = member.last_poll = now
            group.assignor = assignor
            if rebalance:
                self._rebalance(group, "join")
            else:
                self._check_subscriptions(group)
            rules.tell(group, member)
            return JoinResult(
                member_id=member.member_id,
                generation_id=group.generation,
                assignment=list(member.told),
                leader=group.leader,
                members=sorted(group.members),
                assignor=assignor,
                rebalance_in_progress=group.pending,
            )

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> HeartbeatResult:
        """Keep a member alive and tell it its current generation and assignment.

        Sending the generation of the last answer confirms the member adopted it (with cooperative-sticky,
        that releases the partitions it gave up).

        Raises:
            GroupNotFound, UnknownMemberId: Join (again) without a member id.
            IllegalGeneration: The generation is neither current nor the last one this member was told.
        """
        now = time.monotonic()
        with self._lock:
            group, member = self._member(group_id, member_id, now)
            rules.confirm(group, member, generation_id)
            member.last_heartbeat = now
            self._check_subscriptions(group)
            rules.reconcile(group)
            rules.tell(group, member)
            return HeartbeatResult(
                generation_id=group.generation,
                assignment=list(member.told),
                rebalance_in_progress=generation_id != group.generation or group.pending,
            )

    def sync(self, group_id: str, member_id: str, generation_id: int) -> HeartbeatResult:
        """Kafka's SyncGroup: the member's assignment for the current generation (same as a heartbeat)."""
        return self.heartbeat(group_id, member_id, generation_id)

    def leave(
        self, group_id: str, member_id: str | None = None, *, group_instance_id: str | None = None
    ) -> None:
        """Remove a member (by member id, or a static member by instance id); the others rebalance.

        Raises:
            GroupNotFound, UnknownMemberId: No such group or member.
        """
        with self._lock:
            group = self._group(group_id)
            if member_id is None and group_instance_id is not None:
                member_id = group.instances.get(group_instance_id)
            if member_id is None or member_id not in group.members:
                raise UnknownMemberId(
                    f"member {member_id or group_instance_id} is not in group {group_id}",
                    group=group_id,
                    member_id=member_id,
                )
            self._remove(group, member_id, "left the group")
            self._rebalance(group, "leave")

    def record_poll(self, group_id: str, member_id: str) -> None:
        """Note that a member polled (fetched): resets its ``max.poll.interval.ms`` clock.

        Raises:
            GroupNotFound, UnknownMemberId: The member is gone (e.g. it exceeded the poll interval).
        """
        now = time.monotonic()
        with self._lock:
            _, member = self._member(group_id, member_id, now)
            member.last_poll = now

    def _member(self, group_id: str, member_id: str, now: float) -> tuple[Group, Member]:
        group = self._group(group_id)
        self._expire(group, now)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(
                f"member {member_id} is not in group {group_id} (its session may have expired or it was "
                "replaced): join again without a member id",
                group=group_id,
                member_id=member_id,
            )
        return group, member

    def _expire(self, group: Group, now: float) -> None:
        gone = False
        for member in list(group.members.values()):
            if now - member.last_heartbeat > member.session_timeout_s:
                self._remove(group, member.member_id, "session timeout")
                gone = True
            elif now - member.last_poll > member.max_poll_s:
                self._remove(group, member.member_id, "max.poll.interval.ms exceeded")
                gone = True
        if gone:
            self._rebalance(group, "expiry")

    def _remove(self, group: Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id and group.instances.get(member.instance_id) == member_id:
            del group.instances[member.instance_id]
        logger.info("group %s: member %s removed (%s)", group.group_id, member_id, reason)

    def _replace_static(self, group: Group, old_id: str, client_id: str) -> Member:
        old = group.members.pop(old_id)
        new_id = f"{client_id}-{uuid.uuid4()}"
        old.member_id, old.client_id = new_id, client_id
        group.members[new_id] = old
        assert old.instance_id is not None
        group.instances[old.instance_id] = new_id
        for mapping in (group.assignment, group.target):
            if old_id in mapping:
                mapping[new_id] = mapping.pop(old_id)
        if group.leader == old_id:
            group.leader = new_id
        logger.info("group %s: static member %s replaces %s", group.group_id, new_id, old_id)
        return old

    def _topic_names(self) -> list[str]:
        return [t.name for t in self.broker.list_topics()]

    def _resolve(self, group: Group) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
        names = self._topic_names()
        counts = {t.name: t.partitions for t in self.broker.list_topics()}
        subs = {m.member_id: m.subscription(names) for m in group.members.values()}
        wanted = set().union(*subs.values()) if subs else set()
        return subs, {t: counts[t] for t in sorted(wanted) if t in counts}

    def _check_subscriptions(self, group: Group) -> None:
        if group.members and self._resolve(group)[1] != group.partitions:
            self._rebalance(group, "subscribed topics changed")

    def _rebalance(self, group: Group, reason: str) -> None:
        subs, partitions = self._resolve(group)
        rules.rebalance(group, subs, partitions, reason)
