"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups: classic groups on the listener, offsets in the broker's coordinator."""

from __future__ import annotations

from typing import Any

from topiclake.errors import GroupNotEmpty, GroupNotFound, TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.classic_groups import ClassicGroups, GroupError
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.consumer_groups import ConsumerGroups
from topiclake.kafka.context import Context
from topiclake.kafka.handlers import transactions
from topiclake.kafka.handlers.cluster import brokers
from topiclake.platform.cluster.assignment import coordinator_for


def consumer(ctx: Context) -> ConsumerGroups:
    """The listener's consumer-protocol (KIP-848) groups."""
    groups: ConsumerGroups = ctx.state["consumer_groups"]
    return groups


def classic(ctx: Context) -> ClassicGroups:
    """The listener's classic groups (made and hooked into the coordinator by the server)."""
    groups: ClassicGroups = ctx.state["classic_groups"]
    return groups


def _coordinator_for(ctx: Context, key: str) -> dict[str, Any]:
    listed, _controller, _cluster = brokers(ctx)
    me = ctx.broker.config.broker_id
    # the platform's rendezvous hash over live Kafka brokers: every broker names the same coordinator for
    # a group, the one HTTP requests for the group are proxied to (a dead broker's groups move, others stay)
    best = coordinator_for(key, sorted(b["node_id"] for b in listed))
    found = next((b for b in listed if b["node_id"] == best), None)
    if found is None:
        return {"node_id": me, "host": ctx.host, "port": ctx.port}
    return {"node_id": found["node_id"], "host": found["host"], "port": found["port"]}


def check_coordinator(ctx: Context, group_id: str) -> None:
    """NOT_COORDINATOR unless this broker coordinates ``group_id``."""
    if _coordinator_for(ctx, group_id)["node_id"] != ctx.broker.config.broker_id:
        raise GroupError(kerr.NOT_COORDINATOR)


async def find_coordinator(ctx: Context, req: Request) -> dict[str, Any]:
    """FindCoordinator: groups (key type 0) and transactional ids (key type 1: this broker, which serves
    transactions when it is alone; see :mod:`.transactions`)."""
    key_type = int(getattr(req.body, "key_type", 0))
    if key_type == 1:
        return {"error_code": 0, **await ctx.run(transactions.coordinator_node, ctx, str(req.body.key))}
    if key_type != 0:
        return {
            "error_code": kerr.INVALID_REQUEST,
            "error_message": f"unknown coordinator key type {key_type}",
        }
    found = await ctx.run(_coordinator_for, ctx, str(req.body.key))
    return {"error_code": 0, **found}


async def join_group(ctx: Context, req: Request) -> dict[str, Any]:
    """JoinGroup: answered when the group's join barrier completes."""
    b = req.body
    group_id = str(b.group_id)
    try:
        check_coordinator(ctx, group_id)
        if await ctx.run(ctx.broker.groups.has_members, group_id):
            raise GroupError(kerr.INCONSISTENT_GROUP_PROTOCOL, "the group has HTTP members")
        if consumer(ctx).active(group_id):
            raise GroupError(kerr.INCONSISTENT_GROUP_PROTOCOL, "the group uses the consumer protocol")
        session = ms(b.session_timeout)
        rebalance = ms(getattr(b, "rebalance_timeout", None)) if hasattr(b, "rebalance_timeout") else session
        answer = await classic(ctx).join(
            group_id,
            str(b.member_id),
            getattr(b, "group_instance_id", None),
            req.client_id or "",
            "/127.0.0.1",
            session,
            rebalance,
            str(b.protocol_type),
            [(str(p.name), bytes(p.metadata)) for p in b.protocols],
        )
    except GroupError as exc:
        return {"error_code": exc.code, "generation_id": -1, "leader": "", "member_id": b.member_id}
    return {
        "error_code": 0,
        "generation_id": answer.generation,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol or "",
        "leader": answer.leader,
        "member_id": answer.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in answer.members],
    }


async def sync_group(ctx: Context, req: Request) -> dict[str, Any]:
    """SyncGroup: the leader's assignment in, each member's own assignment out."""
    b = req.body
    try:
        assignment, protocol, ptype = await classic(ctx).sync(
            str(b.group_id),
            str(b.member_id),
            int(b.generation_id),
            {str(a.member_id): bytes(a.assignment) for a in b.assignments},
        )
    except GroupError as exc:
        return {"error_code": exc.code, "assignment": b""}
    return {"error_code": 0, "assignment": assignment, "protocol_type": ptype, "protocol_name": protocol}


async def heartbeat(ctx: Context, req: Request) -> dict[str, Any]:
    """Heartbeat."""
    b = req.body
    try:
        classic(ctx).heartbeat(str(b.group_id), str(b.member_id), int(b.generation_id))
    except GroupError as exc:
        return {"error_code": exc.code}
    return {"error_code": 0}


async def leave_group(ctx: Context, req: Request) -> dict[str, Any]:
    """LeaveGroup: one member (v0-2) or a list of members (v3+)."""
    b = req.body
    groups = classic(ctx)
    if hasattr(b, "members"):
        results = []
        for m in b.members:
            code = 0
            try:
                groups.leave(str(b.group_id), str(m.member_id), m.group_instance_id)
            except GroupError as exc:
                code = exc.code
            results.append(
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": code}
            )
        return {"error_code": 0, "members": results}
    try:
        groups.leave(str(b.group_id), str(b.member_id), None)
    except GroupError as exc:
        return {"error_code": exc.code}
    return {"error_code": 0}


def _commit_sync(ctx: Context, group_id: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> int:
    try:
        ctx.broker.groups.commit(group_id, None, -1, offsets, foreign_ok=True)
    except TopiclakeError as exc:
        return kerr.code_for(exc)
    return 0


async def offset_commit(ctx: Context, req: Request) -> dict[str, Any]:
    """OffsetCommit: fenced by the classic group's generation, stored in the shared offsets table."""
    b = req.body
    group_id = str(b.group_id)
    generation = int(getattr(b, "generation_id_or_member_epoch", getattr(b, "generation_id", -1)))
    offsets = {
        (str(t.name), int(p.partition_index)): (int(p.committed_offset), p.committed_metadata)
        for t in b.topics
        for p in t.partitions
    }
    code = 0
    try:
        check_coordinator(ctx, group_id)
        if consumer(ctx).active(group_id):
            consumer(ctx).check_commit(group_id, str(b.member_id), generation)
        else:
            classic(ctx).check_commit(group_id, str(b.member_id), generation)
    except GroupError as exc:
        code = exc.code
    if code == 0 and offsets:
        code = await ctx.run(_commit_sync, ctx, group_id, offsets)
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in b.topics
        ]
    }


def _fetch_sync(ctx: Context, group_id: str, wanted: Any, stable: bool = False) -> list[dict[str, Any]]:
    pending = transactions.coordinator(ctx).pending_offsets(group_id) if stable else set()
    try:
        committed = ctx.broker.groups.committed(group_id)
    except GroupNotFound:
        committed = {}
    if wanted is None:
        names: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            names.setdefault(topic, []).append(partition)
        pairs = list(names.items())
    else:
        pairs = [(str(t.name), [int(i) for i in t.partition_indexes]) for t in wanted]
    out = []
    for topic, parts in pairs:
        rows = []
        for p in parts:
            c = committed.get((topic, p))
            rows.append(
                {
                    "partition_index": p,
                    "committed_offset": c.offset if c is not None else -1,
                    "committed_leader_epoch": -1,
                    "metadata": (c.metadata or "") if c is not None else "",
                    "error_code": kerr.UNSTABLE_OFFSET_COMMIT if (topic, p) in pending else 0,
                }
            )
        out.append({"name": topic, "partitions": rows})
    return out


async def offset_fetch(ctx: Context, req: Request) -> dict[str, Any]:
    """OffsetFetch: the group's committed offsets (-1 where none)."""
    b = req.body
    stable = bool(getattr(b, "require_stable", False))
    topics = await ctx.run(_fetch_sync, ctx, str(b.group_id), b.topics, stable)
    return {"error_code": 0, "topics": topics}


def _list_sync(ctx: Context) -> list[dict[str, Any]]:
    listed = {
        g.group_id: {"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.state}
        for g in ctx.broker.groups.list_groups()
    }
    for g in list(classic(ctx).groups.values()):
        if g.members or g.group_id not in listed:
            listed[g.group_id] = {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type or "consumer",
                "group_state": g.state,
                "group_type": "classic",
            }
    for c in list(consumer(ctx).groups.values()):
        if c.members or c.group_id not in listed:
            state = c.state
            listed[c.group_id] = {
                "group_id": c.group_id,
                "protocol_type": "consumer",
                "group_state": state,
                "group_type": "consumer",
            }
    return [listed[k] for k in sorted(listed)]


async def list_groups(ctx: Context, req: Request) -> dict[str, Any]:
    """ListGroups: Kafka-protocol and HTTP groups alike (one namespace)."""
    groups = await ctx.run(_list_sync, ctx)
    states = {s.lower() for s in getattr(req.body, "states_filter", ())}
    if states:
        groups = [g for g in groups if g["group_state"].lower() in states]
    return {"error_code": 0, "groups": groups}


def _describe_sync(ctx: Context, group_id: str) -> dict[str, Any]:
    if consumer(ctx).active(group_id):  # Kafka answers DescribeGroups of a consumer group this way too
        return {
            "error_code": kerr.GROUP_ID_NOT_FOUND,
            "group_id": group_id,
            "group_state": "Dead",
            "error_message": f"group {group_id} is a consumer group",
            "members": [],
        }
    g = classic(ctx).groups.get(group_id)
    if g is not None and g.members:
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": g.state,
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol or "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(g.protocol),
                    "member_assignment": m.assignment,
                }
                for m in list(g.members.values())
            ],
            "authorized_operations": -2147483648,
        }
    try:
        d = ctx.broker.groups.describe(group_id)
    except GroupNotFound:
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": "Dead",
            "protocol_type": "",
            "members": [],
        }
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": d.state,
        "protocol_type": "consumer",
        "protocol_data": d.assignor or "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": "",
                "member_metadata": b"",
                "member_assignment": b"",
            }
            for m in d.members
        ],
        "authorized_operations": -2147483648,
    }


async def describe_groups(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeGroups: Kafka-protocol groups with their members' bytes; HTTP groups by state and members."""
    return {"groups": [await ctx.run(_describe_sync, ctx, str(g)) for g in req.body.groups]}


def _delete_sync(ctx: Context, group_id: str) -> int:
    if classic(ctx).active(group_id) or consumer(ctx).active(group_id):
        return kerr.NON_EMPTY_GROUP
    try:
        ctx.broker.groups.delete_group(group_id)
    except TopiclakeError as exc:
        return kerr.code_for(exc)
    classic(ctx).groups.pop(group_id, None)
    consumer(ctx).groups.pop(group_id, None)
    return 0


async def delete_groups(ctx: Context, req: Request) -> dict[str, Any]:
    """DeleteGroups: empty groups only, with their committed offsets."""
    return {
        "results": [
            {"group_id": g, "error_code": await ctx.run(_delete_sync, ctx, str(g))}
            for g in req.body.groups_names
        ]
    }


def _offset_delete_sync(ctx: Context, group_id: str, parts: list[tuple[str, int]]) -> int:
    if classic(ctx).active(group_id) or consumer(ctx).active(group_id):
        return kerr.GROUP_SUBSCRIBED_TO_TOPIC
    try:
        ctx.broker.groups.delete_offsets(group_id, parts)
    except GroupNotEmpty:
        return kerr.GROUP_SUBSCRIBED_TO_TOPIC
    except TopiclakeError as exc:
        return kerr.code_for(exc)
    return 0


async def offset_delete(ctx: Context, req: Request) -> dict[str, Any]:
    """OffsetDelete: drop some committed offsets of a group that has no members."""
    b = req.body
    parts = [(str(t.name), int(p.partition_index)) for t in b.topics for p in t.partitions]
    code = await ctx.run(_offset_delete_sync, ctx, str(b.group_id), parts)
    if code in (kerr.GROUP_ID_NOT_FOUND, kerr.NON_EMPTY_GROUP):
        return {"error_code": code, "topics": []}
    return {
        "error_code": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in b.topics
        ],
    }
