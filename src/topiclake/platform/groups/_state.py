"""State and result types of the group coordinator (see :mod:`.group_coordinator`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topiclake.platform.groups.assignors import COOPERATIVE, TopicPartition


@dataclass(frozen=True)
class JoinResult:
    """The answer to a join: who the member is and what it owns in which generation.

    Attributes:
        member_id: The member's id (send it with every later call).
        generation_id: The group's generation (send it with heartbeats and commits).
        assignment: The partitions this member owns now, sorted.
        leader: The group's leader (informational: the coordinator assigns server-side).
        members: Ids of the group's members.
        assignor: The assignor the group uses.
        rebalance_in_progress: Partitions are still being revoked from other members (cooperative): keep
            heartbeating, more may come.
    """

    member_id: str
    generation_id: int
    assignment: list[TopicPartition]
    leader: str | None
    members: list[str]
    assignor: str
    rebalance_in_progress: bool


@dataclass(frozen=True)
class HeartbeatResult:
    """The answer to a heartbeat (or sync): the member's current generation and assignment.

    ``rebalance_in_progress`` is true when the generation differs from the one the member sent (adopt the
    new assignment: stop reading partitions that left it) or when a cooperative revocation is pending.
    """

    generation_id: int
    assignment: list[TopicPartition]
    rebalance_in_progress: bool


@dataclass(frozen=True)
class MemberDescription:
    """One member as :meth:`GroupCoordinator.describe` shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    subscription: list[str]
    pattern: str | None
    assignment: list[TopicPartition]
    generation_id: int
    session_timeout_ms: int
    max_poll_interval_ms: int
    last_heartbeat_ms_ago: int


@dataclass(frozen=True)
class GroupDescription:
    """A group: Kafka's state name (Empty, Stable, CompletingRebalance, PreparingRebalance; a consumer
    group's Assigning, Reconciling), members, and which protocol its members speak: ``http`` (topiclake's
    own), ``classic`` (Kafka's JoinGroup/SyncGroup) or ``consumer`` (Kafka's KIP-848 heartbeat). For a
    consumer group ``generation_id`` is the group epoch."""

    group_id: str
    state: str
    generation_id: int
    assignor: str | None
    leader: str | None
    members: list[MemberDescription]
    group_type: str = "http"


@dataclass(frozen=True)
class GroupListing:
    """A group in :meth:`GroupCoordinator.list_groups`."""

    group_id: str
    state: str
    members: int
    assignor: str | None
    group_type: str = "http"


@dataclass(frozen=True)
class PartitionLag:
    """Lag of one partition for one group.

    ``lag`` is ``end_offset - committed_offset``; with no committed offset it is ``end_offset -
    log_start_offset`` and ``estimated`` is true.
    """

    topic: str
    partition: int
    committed_offset: int | None
    log_start_offset: int
    end_offset: int
    lag: int
    estimated: bool
    member_id: str | None


@dataclass(frozen=True)
class ResetPlanEntry:
    """One partition of an offset reset: the committed offset before and after."""

    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


@dataclass(eq=False)
class Member:
    """A member's mutable state (internal)."""

    member_id: str
    instance_id: str | None
    client_id: str
    topics: tuple[str, ...]
    pattern: re.Pattern[str] | None
    session_timeout_s: float
    max_poll_s: float
    last_heartbeat: float
    last_poll: float
    # What we last told it (generation, assignment), and what it confirmed it holds by heartbeating with
    # that generation. A partition in ``owned`` is held by this member until it confirms a later answer.
    told_generation: int = -1
    told: tuple[TopicPartition, ...] = ()
    acked_generation: int = -1
    owned: tuple[TopicPartition, ...] = ()

    def subscription(self, topics: list[str]) -> frozenset[str]:
        """The topics this member subscribes to, among ``topics`` (the existing ones) for a pattern."""
        if self.pattern is not None:
            return frozenset(t for t in topics if self.pattern.fullmatch(t))
        return frozenset(self.topics)


@dataclass(eq=False)
class Group:
    """A group's mutable state (internal)."""

    group_id: str
    assignor: str | None = None
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    leader: str | None = None
    # The effective assignment of the current generation, and (cooperative) the target it converges to.
    assignment: dict[str, list[TopicPartition]] = field(default_factory=dict)
    target: dict[str, list[TopicPartition]] = field(default_factory=dict)
    # The topic -> partition count the assignment was computed for.
    partitions: dict[str, int] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)

    @property
    def cooperative(self) -> bool:
        return self.assignor in COOPERATIVE

    @property
    def pending(self) -> bool:
        """Whether partitions are withheld until their previous owner confirms it revoked them."""
        return any(sorted(self.target.get(m, [])) != sorted(a) for m, a in self.assignment.items())

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.pending:
            return "PreparingRebalance"
        if any(m.acked_generation != self.generation for m in self.members.values()):
            return "CompletingRebalance"
        return "Stable"

    def owner(self, tp: TopicPartition) -> str | None:
        for member, tps in self.assignment.items():
            if tp in tps:
                return member
        return None
