"""The consumer-group coordinator: membership, server-side assignment and generation-fenced commits.

Clients speak HTTP, so the coordinator computes assignments itself (server-side, as in Kafka's KIP-848)
while keeping the classic vocabulary: a member *joins* (and gets a member id, a generation and its
partitions), *heartbeats* (and learns a new assignment that way), *leaves*; *sync* returns the current
assignment. Every membership or subscription change starts a new generation.

- Expiry is lazy: every call first removes the group's members whose ``session.timeout.ms`` passed without
  a heartbeat or whose ``max.poll.interval.ms`` passed without a poll (:meth:`record_poll`, or a commit),
  using the monotonic clock. Nobody can observe a group except through a call, so this is exactly as
  timely as a reaper thread, without a thread to stop or races against it.
- Eager assignors (``range``, ``roundrobin``, ``sticky``): the new generation's assignment applies at once;
  a member learns it on its next heartbeat. Its commits for partitions it lost are refused from the
  moment they moved, so the group's offsets never go backwards (records may be processed twice:
  at-least-once).
- ``cooperative-sticky``: revoke first, assign in the next generation. A partition moving from a live
  member is withheld until that member confirms the revocation (a heartbeat with the generation that
  revoked it); then a new generation hands it to its new owner. No two members ever hold a partition.
- Static membership: a member that joins with the ``group.instance.id`` of a live member takes its place
  (new member id, same generation and assignment, no rebalance); the old member id is fenced.
- Commits: accepted from a live member carrying the group's generation, or the generation it last
  confirmed for partitions it still holds that no one else was given; a "simple" commit (no member,
  generation -1) only while the group has no members. Offsets beyond the end of a partition are refused.

Group membership lives in memory: after a restart members rejoin (their heartbeats answer
:class:`~topiclake.errors.UnknownMemberId`); committed offsets are recovered from the offsets table.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal

from topiclake.errors import GroupNotEmpty, GroupNotFound, InconsistentGroupProtocol
from topiclake.platform.groups import _admin as _group_admin
from topiclake.platform.groups import _rules as rules
from topiclake.platform.groups._membership import GroupMembership
from topiclake.platform.groups._state import (
    Group,
    GroupDescription,
    GroupListing,
    HeartbeatResult,
    JoinResult,
    MemberDescription,
    PartitionLag,
    ResetPlanEntry,
)
from topiclake.platform.groups.assignors import TopicPartition
from topiclake.platform.groups.offsets_store import CommittedOffset, OffsetsStore, wait
from topiclake.platform.groups.topic_view import TopicView

logger = logging.getLogger(__name__)

__all__ = [
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "HeartbeatResult",
    "JoinResult",
    "MemberDescription",
    "PartitionLag",
    "ResetPlanEntry",
]

#: Kafka's ``offset.metadata.max.bytes``.
MAX_METADATA_BYTES: Final = 4096
_GROUP_ID = re.compile(r"[^\x00-\x1f]{1,255}")

ResetTo = Literal["earliest", "latest", "offset", "timestamp", "shift"]
OffsetReset = Literal["earliest", "latest", "none"]


class GroupCoordinator(GroupMembership):
    """Consumer groups of one broker.

    Args:
        broker: The broker whose topics the groups consume (for partitions and end offsets).
        store: The offsets store; by default one over ``broker.storage``.
        min_session_timeout_ms: Smallest ``session.timeout.ms`` a member may ask for (Kafka's
            ``group.min.session.timeout.ms``; lower here so tests can run fast).
        max_session_timeout_ms: Largest ``session.timeout.ms``.
        commit_timeout_ms: How long a commit waits for its Delta commit.
    """

    def __init__(
        self,
        broker: TopicView,
        store: OffsetsStore | None = None,
        *,
        min_session_timeout_ms: int = 100,
        max_session_timeout_ms: int = 1_800_000,
        commit_timeout_ms: int = 30_000,
    ) -> None:
        self.broker = broker
        self.store = store if store is not None else OffsetsStore(broker.storage)
        self._min_session = min_session_timeout_ms
        self._max_session = max_session_timeout_ms
        self._commit_timeout_s = commit_timeout_ms / 1000
        self._lock = threading.RLock()
        self._groups: dict[str, Group] = {}
        #: Tells whether members of another protocol (the Kafka listener's classic groups) hold a group id:
        #: a group is one namespace, so HTTP joins, simple commits and deletes of such a group are refused.
        self.foreign_groups: Callable[[str], bool] | None = None
        #: Descriptions of the Kafka listener's groups that have members (all, or the one named), so the
        #: REST and console views show them beside HTTP groups.
        self.kafka_groups: Callable[[str | None], list[GroupDescription]] | None = None

    def _check_foreign(self, group_id: str) -> None:
        if self.foreign_groups is not None and self.foreign_groups(group_id):
            raise InconsistentGroupProtocol(
                f"group {group_id} has members speaking the Kafka protocol", group=group_id
            )

    def has_members(self, group_id: str) -> bool:
        """Whether the group has live members of this coordinator (HTTP consumers)."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return False
            self._expire(group, time.monotonic())
            return bool(group.members)

    # ------------------------------------------------------------------ commits

    def commit(
        self,
        group_id: str,
        member_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, tuple[int, str | None] | int],
        *,
        foreign_ok: bool = False,
    ) -> None:
        """Commit offsets (the next offset to read per partition), fenced by the member's generation.

        Returns after the Delta commit that holds them. With ``member_id`` None and generation -1 this is a
        simple commit (standalone consumers), allowed only while the group has no members.

        Raises:
            InvalidRequest: Empty offsets, negative offset or metadata over 4096 bytes.
            TopicNotFound, PartitionNotFound: Unknown topic or partition.
            OffsetOutOfRange: An offset beyond the partition's end.
            GroupNotFound, UnknownMemberId, IllegalGeneration, RebalanceInProgress: Fenced; nothing stored.
            GroupNotEmpty: A simple commit to a group with members.
            InconsistentGroupProtocol: A simple commit to a group of Kafka-protocol members (unless
                ``foreign_ok``: the Kafka listener fenced it already).
        """
        rules.check_group_id(group_id)
        clean = rules.validate_offsets(self.broker, offsets)
        now = time.monotonic()
        with self._lock:
            if member_id is None or generation_id < 0:
                if not foreign_ok:
                    self._check_foreign(group_id)
                group = self._groups.get(group_id)
                if group is not None:
                    self._expire(group, now)
                    if group.members:
                        raise GroupNotEmpty(
                            f"group {group_id} has {len(group.members)} active members: commit with a member "
                            "id and generation (simple commits are for groups without members)",
                            group=group_id,
                        )
                future = self.store.submit(group_id, clean)
            else:
                group, member = self._member(group_id, member_id, now)
                rules.fence(group, member, generation_id, list(clean))
                member.last_poll = now
                future = self.store.submit(group_id, clean, member_id=member_id, generation=generation_id)
        wait(future, self._commit_timeout_s, group_id)

    def committed(
        self, group_id: str, topic: str | None = None, max_age_s: float = 0.0
    ) -> dict[TopicPartition, CommittedOffset]:
        """The committed offsets of a group (of one topic if given); ``max_age_s``: other processes'
        commits may be seen that late (:meth:`OffsetsStore.refresh`).

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        self.store.refresh(max_age_s)  # offsets committed by other processes too (Spark's groupId)
        with self._lock:
            if group_id not in self._groups and group_id not in self.store.groups():
                raise GroupNotFound(f"group {group_id!r} does not exist", group=group_id)
        found = self.store.committed(group_id)
        return {tp: c for tp, c in found.items() if topic is None or tp[0] == topic}

    # ------------------------------------------------------------------ admin

    def list_groups(self, max_age_s: float = 0.0) -> list[GroupListing]:
        """Every group with members or committed offsets, by id; ``max_age_s``: other processes' offset
        commits may be seen that late (:meth:`OffsetsStore.refresh`)."""
        self.store.refresh(max_age_s)
        now = time.monotonic()
        with self._lock:
            for group in self._groups.values():
                self._expire(group, now)
            listed = {
                g.group_id: GroupListing(g.group_id, g.state(), len(g.members), g.assignor)
                for g in self._groups.values()
            }
        for d in self.kafka_groups(None) if self.kafka_groups is not None else []:
            listed[d.group_id] = GroupListing(d.group_id, d.state, len(d.members), d.assignor, d.group_type)
        for gid in self.store.groups():
            listed.setdefault(gid, GroupListing(gid, "Empty", 0, None))
        return [listed[k] for k in sorted(listed)]

    def describe(self, group_id: str) -> GroupDescription:
        """State, generation, leader, members and their assignments.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        self.store.refresh()
        now = time.monotonic()
        kafka = self.kafka_groups(group_id) if self.kafka_groups is not None else []
        if kafka:
            return kafka[0]
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                if group_id not in self.store.groups():
                    raise GroupNotFound(f"group {group_id!r} does not exist", group=group_id)
                return GroupDescription(group_id, "Empty", 0, None, None, [])
            self._expire(group, now)
            self._check_subscriptions(group)
            members = [
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    subscription=sorted(m.subscription(self._topic_names())),
                    pattern=rules.pattern_src(m.pattern),
                    assignment=list(group.assignment.get(m.member_id, [])),
                    generation_id=m.acked_generation,
                    session_timeout_ms=int(m.session_timeout_s * 1000),
                    max_poll_interval_ms=int(m.max_poll_s * 1000),
                    last_heartbeat_ms_ago=int((now - m.last_heartbeat) * 1000),
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ]
            return GroupDescription(
                group_id, group.state(), group.generation, group.assignor, group.leader, members
            )

    def lag(self, group_id: str, topic: str | None = None, max_age_s: float = 0.0) -> list[PartitionLag]:
        """Lag per partition the group committed for or is assigned (see :class:`PartitionLag`);
        ``max_age_s`` as for :meth:`committed`."""
        with self._lock:
            group = self._groups.get(group_id)
            owners = {tp: m for m, tps in group.assignment.items() for tp in tps} if group else {}
        committed = self.committed(group_id, topic, max_age_s)
        return _group_admin.lag(self.broker, committed, owners, topic)

    def resolve_position(self, group_id: str, topic: str, partition: int, reset: OffsetReset) -> int:
        """Where a member of the group starts reading a partition: the committed offset if it is within the
        log, else the log start (``earliest``) or end (``latest``).

        Raises:
            NoOffsetForPartition: ``none`` and nothing committed.
            OffsetOutOfRange: ``none`` and the committed offset is outside the log.
        """
        return _group_admin.resolve_position(self.broker, self.store, group_id, topic, partition, reset)

    def reset_offsets(
        self,
        group_id: str,
        to: ResetTo,
        value: int | None = None,
        *,
        topics: Sequence[str] | None = None,
        partitions: Sequence[TopicPartition] | None = None,
        dry_run: bool = False,
    ) -> list[ResetPlanEntry]:
        """``kafka-consumer-groups --reset-offsets``: to earliest, latest, an offset, a timestamp (ms) or
        shifted by N, clamped to each partition's [log start, end]. The partitions are ``partitions``, all
        partitions of ``topics``, or (neither) every partition the group has committed for.

        Returns:
            The plan (applied unless ``dry_run``).

        Raises:
            GroupNotEmpty: The group has active members.
            GroupNotFound: No scope given and the group has no committed offsets.
            InvalidRequest: Bad ``to``/``value``, or a shift of a partition with nothing committed.
        """
        rules.check_group_id(group_id)
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None:
                self._expire(group, time.monotonic())
                if group.members:
                    raise GroupNotEmpty(
                        f"group {group_id} has {len(group.members)} active members: stop them before "
                        "resetting its offsets",
                        group=group_id,
                    )
        committed = self.store.committed(group_id)
        plan = _group_admin.reset_plan(self.broker, group_id, committed, to, value, topics, partitions)
        if not dry_run and plan:
            self.commit(group_id, None, -1, {(e.topic, e.partition): (e.new_offset, "") for e in plan})
            logger.info("group %s: reset offsets of %d partitions (%s %s)", group_id, len(plan), to, value)
        return plan

    def delete_group(self, group_id: str) -> None:
        """Delete a group and its committed offsets.

        Raises:
            GroupNotFound: No such group.
            GroupNotEmpty: The group has active members.
            InconsistentGroupProtocol: Kafka-protocol members hold the group.
        """
        self._check_foreign(group_id)
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None:
                self._expire(group, time.monotonic())
                if group.members:
                    raise GroupNotEmpty(
                        f"group {group_id} has {len(group.members)} active members: it cannot be deleted",
                        group=group_id,
                    )
            elif group_id not in self.store.groups():
                raise GroupNotFound(f"group {group_id!r} does not exist", group=group_id)
            self._groups.pop(group_id, None)
            self.store.delete_group(group_id)
        logger.info("deleted group %s", group_id)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> int:
        """Delete some committed offsets of a group without members (Kafka's OffsetDelete).

        Raises:
            GroupNotFound: No such group.
            GroupNotEmpty: The group has active members.
            InconsistentGroupProtocol: Kafka-protocol members hold the group.
        """
        self._check_foreign(group_id)
        if self.has_members(group_id):
            raise GroupNotEmpty(f"group {group_id} has active members", group=group_id)
        if group_id not in self.store.groups():
            raise GroupNotFound(f"group {group_id!r} does not exist", group=group_id)
        return self.store.delete_offsets(group_id, partitions)

    def close(self) -> None:
        """Write pending commits and stop the offsets store."""
        self.store.close()

    # ------------------------------------------------------------------ internals

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            raise GroupNotFound(f"group {group_id!r} does not exist: join it first", group=group_id)
        return group
