"""Native API: consumer groups -- membership, commits, committed offsets, lag, offset resets (``/v1``).

The coordinator assigns partitions server-side: a member joins, then heartbeats (every
``session_timeout_ms / 3`` or so) and adopts the assignment each heartbeat returns. Plain ``def`` routes:
FastAPI runs them in its threadpool, so blocking Delta commits never run on the event loop.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from topiclake.api.auth import AccessDep
from topiclake.api.errors import HTTPError
from topiclake.errors import GroupNotFound
from topiclake.platform.groups.group_coordinator import (
    GroupCoordinator,
    GroupDescription,
    PartitionLag,
    ResetPlanEntry,
)
from topiclake.platform.groups.offsets_store import CommittedOffset
from topiclake.security import Operation, ResourceType

router = APIRouter(prefix="/v1", tags=["groups"])


async def get_coordinator(request: Request) -> GroupCoordinator:
    """The gateway's group coordinator (``app.state.groups``, else ``broker.groups``)."""
    groups = getattr(request.app.state, "groups", None)
    if groups is None:
        groups = getattr(request.app.state.broker, "groups", None)
    if not isinstance(groups, GroupCoordinator):
        raise HTTPError(503, 50003, "consumer groups are not enabled on this gateway", code="unavailable")
    return groups


GroupsDep = Annotated[GroupCoordinator, Depends(get_coordinator)]


class JoinBody(BaseModel):
    """Join a group (or rejoin with ``member_id``), subscribing to topics or a regex pattern."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "topics": ["orders"],
                    "client_id": "billing-1",
                    "session_timeout_ms": 10000,
                    "max_poll_interval_ms": 300000,
                    "assignor": "cooperative-sticky",
                }
            ]
        },
    )

    member_id: str | None = Field(None, description="Known member id when rejoining; omit on first join.")
    topics: list[str] | None = Field(None, description="Topics to subscribe to.")
    pattern: str | None = Field(None, description="Or a regex; matching topics created later join too.")
    group_instance_id: str | None = Field(None, description="Static membership (Kafka group.instance.id).")
    client_id: str = Field("consumer", min_length=1, max_length=255)
    session_timeout_ms: int = Field(45_000, description="Removed after this long without a heartbeat.")
    max_poll_interval_ms: int = Field(300_000, description="Removed after this long without a poll/commit.")
    assignor: Literal["range", "roundrobin", "sticky", "cooperative-sticky"] = "range"


class HeartbeatBody(BaseModel):
    """A heartbeat with the generation of the last answer; ``poll`` also resets max.poll.interval.ms."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"generation_id": 3}]})

    generation_id: int
    poll: bool = Field(False, description="The member polled (fetched) since the last heartbeat.")


class OffsetEntry(BaseModel):
    """The next offset to read in one partition."""

    model_config = ConfigDict(extra="forbid")

    topic: str
    partition: int
    offset: int
    metadata: str | None = None


class CommitBody(BaseModel):
    """Offsets to commit, by a member in its generation (or a simple commit for a group with no members)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "member_id": "billing-1-6f1c...",
                    "generation_id": 3,
                    "offsets": [{"topic": "orders", "partition": 0, "offset": 42, "metadata": "batch 7"}],
                }
            ]
        },
    )

    member_id: str | None = Field(None, description="Omit (with generation_id -1) for a simple commit.")
    generation_id: int = -1
    offsets: list[OffsetEntry] = Field(min_length=1)


class PartitionRef(BaseModel):
    """One partition of a topic."""

    model_config = ConfigDict(extra="forbid")

    topic: str
    partition: int


class ResetBody(BaseModel):
    """``kafka-consumer-groups --reset-offsets``: the scope is ``partitions``, all partitions of ``topics``,
    or (neither) every partition the group committed for."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"to": "shift", "value": -100, "topics": ["orders"], "dry_run": True}]
        },
    )

    to: Literal["earliest", "latest", "offset", "timestamp", "shift"]
    value: int | None = Field(None, description="The offset, timestamp (ms) or shift (may be negative).")
    topics: list[str] | None = None
    partitions: list[PartitionRef] | None = None
    dry_run: bool = False


def _tps(tps: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in tps]


def _describe_body(d: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": d.group_id,
        "type": d.group_type,
        "state": d.state,
        "generation_id": d.generation_id,
        "assignor": d.assignor,
        "leader": d.leader,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "subscription": m.subscription,
                "pattern": m.pattern,
                "assignment": _tps(m.assignment),
                "generation_id": m.generation_id,
                "session_timeout_ms": m.session_timeout_ms,
                "max_poll_interval_ms": m.max_poll_interval_ms,
                "last_heartbeat_ms_ago": m.last_heartbeat_ms_ago,
            }
            for m in d.members
        ],
    }


def _committed_body(c: CommittedOffset) -> dict[str, Any]:
    return {
        "topic": c.topic,
        "partition": c.partition,
        "offset": c.offset,
        "metadata": c.metadata,
        "commit_timestamp": c.commit_timestamp_ms,
        "member_id": c.member_id,
        "generation_id": c.generation,
    }


def _lag_body(x: PartitionLag) -> dict[str, Any]:
    return {
        "topic": x.topic,
        "partition": x.partition,
        "committed_offset": x.committed_offset,
        "log_start_offset": x.log_start_offset,
        "end_offset": x.end_offset,
        "lag": x.lag,
        "estimated": x.estimated,
        "member_id": x.member_id,
    }


def _plan_body(x: ResetPlanEntry) -> dict[str, Any]:
    return {
        "topic": x.topic,
        "partition": x.partition,
        "current_offset": x.current_offset,
        "new_offset": x.new_offset,
    }


@router.get("/groups", summary="List consumer groups (with members or committed offsets)")
def list_groups(groups: GroupsDep, access: AccessDep) -> dict[str, Any]:
    listed = access.visible(groups.list_groups(), lambda g: g.group_id, ResourceType.GROUP)
    return {
        "groups": [
            {
                "group_id": g.group_id,
                "type": g.group_type,
                "state": g.state,
                "members": g.members,
                "assignor": g.assignor,
            }
            for g in listed
        ]
    }


@router.get("/groups/{group}", summary="Describe a group: state, generation, members and assignments")
def describe_group(group: str, groups: GroupsDep) -> dict[str, Any]:
    return _describe_body(groups.describe(group))


@router.delete("/groups/{group}", status_code=204, summary="Delete a group and its offsets (no members)")
def delete_group(group: str, groups: GroupsDep) -> Response:
    groups.delete_group(group)
    return Response(status_code=204)


@router.post("/groups/{group}/members", summary="Join a group; answers member id, generation, assignment")
def join(group: str, body: JoinBody, groups: GroupsDep) -> dict[str, Any]:
    r = groups.join(
        group,
        body.member_id,
        topics=body.topics,
        pattern=body.pattern,
        group_instance_id=body.group_instance_id,
        client_id=body.client_id,
        session_timeout_ms=body.session_timeout_ms,
        max_poll_interval_ms=body.max_poll_interval_ms,
        assignor=body.assignor,
    )
    return {
        "member_id": r.member_id,
        "generation_id": r.generation_id,
        "assignment": _tps(r.assignment),
        "leader": r.leader,
        "members": r.members,
        "assignor": r.assignor,
        "rebalance_in_progress": r.rebalance_in_progress,
    }


@router.post(
    "/groups/{group}/members/{member}/heartbeat",
    summary="Heartbeat; answers the member's current generation and assignment",
)
def heartbeat(group: str, member: str, body: HeartbeatBody, groups: GroupsDep) -> dict[str, Any]:
    if body.poll:
        groups.record_poll(group, member)
    r = groups.heartbeat(group, member, body.generation_id)
    return {
        "generation_id": r.generation_id,
        "assignment": _tps(r.assignment),
        "rebalance_in_progress": r.rebalance_in_progress,
    }


@router.delete("/groups/{group}/members/{member}", status_code=204, summary="Leave the group (rebalances)")
def leave(group: str, member: str, groups: GroupsDep) -> Response:
    groups.leave(group, member)
    return Response(status_code=204)


@router.post("/groups/{group}/offsets", summary="Commit offsets, fenced by the member's generation")
def commit(group: str, body: CommitBody, groups: GroupsDep, access: AccessDep) -> dict[str, Any]:
    access.require_topics(Operation.READ, (o.topic for o in body.offsets))  # Kafka's OffsetCommit
    offsets: dict[tuple[str, int], tuple[int, str | None] | int] = {
        (o.topic, o.partition): (o.offset, o.metadata) for o in body.offsets
    }
    groups.commit(group, body.member_id, body.generation_id if body.member_id else -1, offsets)
    return {
        "committed": [{"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in body.offsets]
    }


@router.get("/groups/{group}/offsets", summary="Committed offsets of a group")
def committed(
    group: str,
    groups: GroupsDep,
    access: AccessDep,
    topic: str | None = Query(None, description="Only this topic."),
) -> dict[str, Any]:
    found = groups.committed(group, topic)
    shown = access.visible(sorted(found.items()), lambda item: item[0][0])  # Kafka's OffsetFetch
    return {"group_id": group, "offsets": [_committed_body(c) for _, c in shown]}


@router.get("/groups/{group}/lag", summary="Lag per partition: end offset minus committed offset")
def lag(
    group: str, groups: GroupsDep, topic: str | None = Query(None, description="Only this topic.")
) -> dict[str, Any]:
    rows = groups.lag(group, topic)
    return {
        "group_id": group,
        "total_lag": sum(r.lag for r in rows),
        "partitions": [_lag_body(r) for r in rows],
    }


@router.post(
    "/groups/{group}/offsets/reset", summary="Reset offsets (earliest/latest/offset/timestamp/shift)"
)
def reset(group: str, body: ResetBody, groups: GroupsDep, access: AccessDep) -> dict[str, Any]:
    if body.partitions is not None:
        access.require_topics(Operation.READ, (p.topic for p in body.partitions))
    elif body.topics is not None:
        access.require_topics(Operation.READ, body.topics)
    elif access.enforced:  # every topic the group committed for (AlterConsumerGroupOffsets: Read on each)
        with contextlib.suppress(GroupNotFound):  # reset_offsets answers it, after checking the request
            access.require_topics(Operation.READ, (tp[0] for tp in groups.committed(group, None)))
    plan = groups.reset_offsets(
        group,
        body.to,
        body.value,
        topics=body.topics,
        partitions=[(p.topic, p.partition) for p in body.partitions] if body.partitions is not None else None,
        dry_run=body.dry_run,
    )
    return {"group_id": group, "dry_run": body.dry_run, "plan": [_plan_body(x) for x in plan]}
