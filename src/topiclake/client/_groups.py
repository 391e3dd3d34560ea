"""Consumer-group calls of the native API: membership, offsets, lag and resets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import quote

from topiclake.client._base import ClientBase
from topiclake.client.responses import (
    Assignor,
    CommittedOffset,
    GroupDescription,
    GroupLag,
    GroupListing,
    HeartbeatResponse,
    JoinResponse,
    ResetPlan,
    ResetTo,
    TopicPartition,
)


class GroupsMixin(ClientBase):
    """Consumer groups."""

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[GroupListing]:
        """Every group with members or committed offsets, by id."""
        return cast(list[GroupListing], self._json("GET", "/v1/groups")["groups"])

    def describe_group(self, group: str) -> GroupDescription:
        """State, generation, assignor, leader, members and their assignments.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        return cast(GroupDescription, self._json("GET", self._group_path(group)))

    def delete_group(self, group: str) -> None:
        """Delete a group and its committed offsets.

        Raises:
            GroupNotFound: No such group.
            GroupNotEmpty: The group has active members.
        """
        self._request("DELETE", self._group_path(group))

    def join_group(
        self,
        group: str,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        member_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "consumer",
        session_timeout_ms: int = 45_000,
        max_poll_interval_ms: int = 300_000,
        assignor: Assignor = "range",
    ) -> JoinResponse:
        """Join a group (or rejoin with a known ``member_id``), subscribing to ``topics`` or a ``pattern``.

        Then heartbeat (about every ``session_timeout_ms / 3``) and adopt the assignment each heartbeat
        answers.

        Raises:
            InvalidRequest: Bad group id, subscription, timeouts or assignor.
            InconsistentGroupProtocol: The group's members use another assignor.
            UnknownMemberId: ``member_id`` is not in the group (join again without one).
        """
        body: dict[str, Any] = {
            "topics": list(topics) if topics is not None else None,
            "pattern": pattern,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "client_id": client_id,
            "session_timeout_ms": session_timeout_ms,
            "max_poll_interval_ms": max_poll_interval_ms,
            "assignor": assignor,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return cast(JoinResponse, self._json("POST", self._group_path(group) + "/members", json=body))

    def heartbeat(
        self, group: str, member_id: str, generation_id: int, *, poll: bool = False
    ) -> HeartbeatResponse:
        """Keep a member alive; answers its current generation and assignment.

        Args:
            group: Group id.
            member_id: The member's id from :meth:`join_group`.
            generation_id: The generation of the last answer (confirms the member adopted it).
            poll: The member fetched since the last heartbeat (resets ``max.poll.interval.ms``).

        Raises:
            GroupNotFound, UnknownMemberId: Join again without a member id.
            IllegalGeneration: The generation is stale: join again (with the member id).
        """
        path = f"{self._group_path(group)}/members/{quote(member_id, safe='')}/heartbeat"
        return cast(
            HeartbeatResponse, self._json("POST", path, json={"generation_id": generation_id, "poll": poll})
        )

    def leave_group(self, group: str, member_id: str) -> None:
        """Leave a group; the other members rebalance.

        Raises:
            GroupNotFound, UnknownMemberId: No such group or member.
        """
        self._request("DELETE", f"{self._group_path(group)}/members/{quote(member_id, safe='')}")

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int | tuple[int, str | None]],
        *,
        member_id: str | None = None,
        generation_id: int = -1,
    ) -> list[TopicPartition]:
        """Commit offsets (the next offset to read per partition), fenced by the member's generation.

        Without ``member_id`` this is a simple commit, allowed only while the group has no members.

        Args:
            group: Group id.
            offsets: ``{(topic, partition): offset}`` or ``{(topic, partition): (offset, metadata)}``.
            member_id: The committing member.
            generation_id: That member's generation.

        Returns:
            The committed partitions.

        Raises:
            IllegalGeneration, UnknownMemberId: Stale member: join again.
            RebalanceInProgress: A partition moved to another member: heartbeat for the new assignment.
            OffsetOutOfRange: An offset beyond the partition's end.
            GroupNotEmpty: A simple commit to a group with members.
        """
        entries = []
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, None)
            entries.append({"topic": topic, "partition": partition, "offset": offset, "metadata": metadata})
        body: dict[str, Any] = {"offsets": entries, "generation_id": generation_id}
        if member_id is not None:
            body["member_id"] = member_id
        doc = self._json("POST", self._group_path(group) + "/offsets", json=body)
        return [{"topic": c["topic"], "partition": c["partition"]} for c in doc["committed"]]

    def committed_offsets(self, group: str, topic: str | None = None) -> list[CommittedOffset]:
        """The committed offsets of a group (of one topic if given), sorted by topic and partition.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        doc = self._json("GET", self._group_path(group) + "/offsets", params={"topic": topic})
        return cast(list[CommittedOffset], doc["offsets"])

    def group_lag(self, group: str, topic: str | None = None) -> GroupLag:
        """Lag per partition the group committed for or is assigned, and the total.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        return cast(GroupLag, self._json("GET", self._group_path(group) + "/lag", params={"topic": topic}))

    def reset_offsets(
        self,
        group: str,
        to: ResetTo,
        value: int | None = None,
        *,
        topics: Sequence[str] | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        dry_run: bool = False,
    ) -> ResetPlan:
        """``kafka-consumer-groups --reset-offsets``, clamped to each partition's [log start, end].

        Args:
            group: Group id.
            to: ``earliest``, ``latest``, ``offset``, ``timestamp`` (ms) or ``shift`` (by ``value``).
            value: The offset, timestamp or shift (may be negative) for those three.
            topics: Every partition of these topics.
            partitions: These partitions. With neither, every partition the group committed for.
            dry_run: Only answer the plan.

        Raises:
            GroupNotEmpty: The group has active members.
            GroupNotFound: No scope given and the group has no committed offsets.
            InvalidRequest: Bad ``to``/``value``, or a shift of a partition with nothing committed.
        """
        body: dict[str, Any] = {"to": to, "dry_run": dry_run}
        if value is not None:
            body["value"] = value
        if topics is not None:
            body["topics"] = list(topics)
        if partitions is not None:
            body["partitions"] = [{"topic": t, "partition": p} for t, p in partitions]
        return cast(ResetPlan, self._json("POST", self._group_path(group) + "/offsets/reset", json=body))
