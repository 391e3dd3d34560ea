"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: Kafka's consumer group protocol (KIP-848), served by
the same coordinator (placement, offsets table) as classic and HTTP groups; a group id is one namespace."""

from __future__ import annotations

import uuid
from typing import Any

from topiclake.kafka import errors as kerr
from topiclake.kafka.classic_groups import GroupError
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.consumer_groups import ConsumerMember, Heartbeat, Owned
from topiclake.kafka.context import Context
from topiclake.kafka.handlers.cluster import topic_uuid
from topiclake.kafka.handlers.groups import check_coordinator, classic, consumer


def _topics(ctx: Context) -> tuple[dict[str, int], dict[uuid.UUID, str]]:
    infos = ctx.broker.list_topics()
    return {t.name: t.partitions for t in infos}, {topic_uuid(t): t.name for t in infos}


def _encode(owned: Owned, ids: dict[str, uuid.UUID], with_names: bool = False) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(owned):
        by_topic.setdefault(topic, []).append(p)
    out = []
    for topic, parts in by_topic.items():
        entry: dict[str, Any] = {"topic_id": ids.get(topic), "partitions": parts}
        if with_names:
            entry["topic_name"] = topic
        out.append(entry)
    return out


def _check_namespace(ctx: Context, group_id: str) -> None:
    if classic(ctx).active(group_id) or ctx.broker.groups.has_members(group_id):
        raise GroupError(kerr.GROUP_ID_NOT_FOUND, f"group {group_id} is a classic group with members")


async def consumer_group_heartbeat(ctx: Context, req: Request) -> dict[str, Any]:
    """ConsumerGroupHeartbeat: join, heartbeat, reconcile, leave (v0: the broker names a new member;
    v1: the client does)."""
    b = req.body
    group_id = str(b.group_id)
    host = str(getattr(req.connection, "host", "") or "127.0.0.1")
    try:
        check_coordinator(ctx, group_id)
        await ctx.run(_check_namespace, ctx, group_id)
        topics, by_id = await ctx.run(_topics, ctx)
        owned = None
        if b.topic_partitions is not None:
            owned = frozenset(
                (by_id[t.topic_id], int(p))
                for t in b.topic_partitions
                if t.topic_id in by_id
                for p in t.partitions
            )
        hb = Heartbeat(
            member_id=str(b.member_id or ""),
            epoch=int(b.member_epoch),
            instance_id=b.instance_id,
            rack_id=b.rack_id,
            rebalance_timeout_ms=ms(b.rebalance_timeout),
            topics=None
            if b.subscribed_topic_names is None
            else tuple(str(t) for t in b.subscribed_topic_names),
            regex=getattr(b, "subscribed_topic_regex", None),
            assignor=b.server_assignor,
            owned=owned,
            client_id=req.client_id or "",
            client_host=f"/{host}",
        )
        member, send = consumer(ctx).heartbeat(group_id, hb, topics)
    except GroupError as exc:
        return {
            "error_code": exc.code,
            "error_message": str(exc),
            "member_epoch": -1,
            "heartbeat_interval": 0,
        }
    ids = {name: tid for tid, name in by_id.items()}
    out: dict[str, Any] = {
        "error_code": 0,
        "member_id": member.member_id,
        "member_epoch": member.epoch,
        "heartbeat_interval": consumer(ctx).heartbeat_interval_ms,
    }
    if send is not None:
        out["assignment"] = {"topic_partitions": _encode(send, ids)}
    return out


def _member(m: ConsumerMember, target: Owned, ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "member_epoch": m.epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.topics),
        "subscribed_topic_regex": m.regex,
        "assignment": {"topic_partitions": _encode(m.assigned, ids, True)},
        "target_assignment": {"topic_partitions": _encode(target, ids, True)},
        "member_type": 1,  # consumer
    }


def _describe_one(ctx: Context, group_id: str, ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    try:
        check_coordinator(ctx, group_id)
    except GroupError as exc:
        return {"error_code": exc.code, "group_id": group_id, "group_state": "", "members": []}
    g = consumer(ctx).groups.get(group_id)
    if g is None:
        known = classic(ctx).active(group_id) or ctx.broker.groups.has_members(group_id)
        msg = f"group {group_id} is not a consumer group" if known else f"group {group_id} not found"
        return {
            "error_code": kerr.GROUP_ID_NOT_FOUND,
            "error_message": msg,
            "group_id": group_id,
            "group_state": "Dead",
            "members": [],
        }
    members = list(g.members.values())
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": g.state,
        "group_epoch": g.epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor_name": g.assignor,
        "members": [_member(m, g.target.get(m.member_id, frozenset()), ids) for m in members],
    }


async def consumer_group_describe(ctx: Context, req: Request) -> dict[str, Any]:
    """ConsumerGroupDescribe: epochs, assignor, and every member's assignment and target."""
    _topics_now, by_id = await ctx.run(_topics, ctx)
    ids = {name: tid for tid, name in by_id.items()}
    return {"groups": [_describe_one(ctx, str(g), ids) for g in req.body.group_ids]}
