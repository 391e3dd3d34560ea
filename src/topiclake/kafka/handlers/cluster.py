"""ApiVersions, Metadata, CreateTopics, DeleteTopics."""

from __future__ import annotations

import uuid
from typing import Any

from topiclake.errors import TopiclakeError, TopicNotFound
from topiclake.kafka import errors as kerr
from topiclake.kafka.authz import allowed
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.kafka.versions import TRANSACTION_VERSION, TRANSACTION_VERSION_MAX, advertised
from topiclake.platform.catalog import TopicInfo
from topiclake.security import CLUSTER_NAME, Operation, ResourceType

DEFAULT_PARTITIONS = 1


def api_keys(transaction_version: int = TRANSACTION_VERSION_MAX) -> list[dict[str, int]]:
    """The advertised (api key, min, max) list."""
    spans = sorted(advertised(transaction_version).items())
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in spans]


async def api_versions(ctx: Context, req: Request) -> dict[str, Any]:
    """ApiVersions: exactly the versions implemented, and the ``transaction.version`` feature (v3+): Kafka
    4.x clients use transaction version 2 once it is finalized at 2. The finalized-features epoch is the
    level (the same on every broker set alike; it grows when the level is raised, so clients read it again).
    """
    level = ctx.broker.config.transaction_version
    out: dict[str, Any] = {"error_code": 0, "api_keys": api_keys(level), "finalized_features_epoch": -1}
    if req.version >= 4:  # v3 leaves out features whose minimum is 0 (Kafka's rule)
        out["supported_features"] = [
            {"name": TRANSACTION_VERSION, "min_version": 0, "max_version": TRANSACTION_VERSION_MAX}
        ]
    if level > 0:
        out["finalized_features_epoch"] = level
        out["finalized_features"] = [
            {"name": TRANSACTION_VERSION, "min_version_level": level, "max_version_level": level}
        ]
    return out


def topic_uuid(info: TopicInfo) -> uuid.UUID:
    """The topic's id from the shared catalog, the same on every broker."""
    try:
        return uuid.UUID(info.topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"topiclake:{info.name}:{info.created_ms}")


def brokers(ctx: Context) -> tuple[list[dict[str, Any]], int, str]:
    """Every live broker with a Kafka listener, the controller id and the cluster id."""
    md = ctx.broker.metadata()
    out = []
    for b in md.brokers:
        ep = b.listener("kafka")
        if ep is None and b.broker_id == ctx.broker.config.broker_id:
            out.append({"node_id": b.broker_id, "host": ctx.host, "port": ctx.port, "rack": b.rack})
        elif ep is not None:
            out.append({"node_id": b.broker_id, "host": ep.host, "port": ep.port, "rack": b.rack})
    return out, md.controller_id, md.cluster_id


def _may_auto_create(ctx: Context, req: Request, name: str) -> bool:
    """Whether a Metadata request may create a topic it names: the broker allows it, the request does
    (``allow_auto_topic_creation``, v4+; always before), and the principal may Create on the cluster or
    the topic (Kafka's rule; without it the topic is unknown, as in Kafka)."""
    if not ctx.broker.config.auto_create_topics_enable:
        return False
    if not bool(getattr(req.body, "allow_auto_topic_creation", True)):
        return False
    return allowed(ctx, req, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or allowed(
        ctx, req, Operation.CREATE, ResourceType.TOPIC, name
    )


def _metadata_sync(ctx: Context, req: Request) -> dict[str, Any]:
    broker = ctx.broker
    md = broker.metadata()
    listed, controller, cluster_id = brokers(ctx)
    live = {b["node_id"] for b in listed}
    me = broker.config.broker_id
    if controller not in live:  # none yet, or not listening for Kafka: clients would wait for it forever
        controller = me  # admin requests (sent to the controller) are served by any broker
    wanted = req.body.topics
    if req.version == 0 and wanted is not None and len(wanted) == 0:
        wanted = None  # v0: an empty list means all topics
    infos: dict[str, TopicInfo] = {t.name: t for t in broker.list_topics()}
    by_id = {topic_uuid(t): t.name for t in infos.values()}
    names: list[tuple[str | None, uuid.UUID | None]]
    if wanted is None:
        names = [(n, None) for n in sorted(infos)]
    else:
        names = []
        for t in wanted:
            tid = getattr(t, "topic_id", None)
            name = t.name
            if name is None and tid is not None and tid.int != 0:
                name = by_id.get(tid)
            names.append((name, tid))
    topics = []
    for name, tid in names:
        info = infos.get(name) if name is not None else None
        if info is None and name is not None:
            try:  # created on another broker since the last catalog read?
                info = broker.describe_topic(name)
            except TopicNotFound:
                info = None
        if info is None and name is not None and _may_auto_create(ctx, req, name):
            try:  # Kafka's auto.create.topics.enable
                info = broker.auto_create(name)
            except TopiclakeError as exc:
                code = kerr.code_for(exc)
                topics.append(
                    {"error_code": code, "name": name, "topic_id": uuid.UUID(int=0), "partitions": []}
                )
                continue
            md = broker.metadata()  # its leaders
        if info is None:
            topics.append(
                {
                    "error_code": kerr.UNKNOWN_TOPIC_OR_PARTITION,
                    "name": name,
                    "topic_id": tid or uuid.UUID(int=0),
                    "partitions": [],
                }
            )
            continue
        states = md.partitions.get(info.name, ())
        parts = []
        for p in range(info.partitions):
            st = states[p] if p < len(states) else None
            leader = me
            if st is not None:  # the leader, else a live replica with a Kafka listener: never -1
                leader = next((r for r in (st.leader, *st.isr, *st.replicas) if r in live), me)
            replicas = [r for r in st.replicas if r in live] if st is not None else [me]
            isr = [r for r in st.isr if r in live] if st is not None else [me]
            parts.append(
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": leader,
                    "leader_epoch": st.leader_epoch if st is not None else 0,
                    "replica_nodes": replicas or [leader],
                    "isr_nodes": isr or [leader],
                    "offline_replicas": [],
                }
            )
        topics.append(
            {
                "error_code": 0,
                "name": info.name,
                "topic_id": topic_uuid(info),
                "is_internal": False,
                "partitions": parts,
                "topic_authorized_operations": -2147483648,
            }
        )
    return {
        "brokers": listed,
        "cluster_id": cluster_id,
        "controller_id": controller,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


async def metadata(ctx: Context, req: Request) -> dict[str, Any]:
    """Metadata: every live broker's Kafka listener, each partition's leader, replicas, ISR and epoch."""
    return await ctx.run(_metadata_sync, ctx, req)


def _create_one(ctx: Context, topic: Any, validate_only: bool) -> dict[str, Any]:
    name = str(topic.name)
    n = int(topic.num_partitions)
    if n == -1:
        n = len(topic.assignments) or DEFAULT_PARTITIONS
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    rf = int(topic.replication_factor)
    if rf == -1 and topic.assignments:
        rf = len(topic.assignments[0].broker_ids)
    out: dict[str, Any] = {"name": name, "num_partitions": n, "replication_factor": max(rf, 1)}
    if rf == 0 or rf < -1:
        return {**out, "error_code": kerr.INVALID_REPLICATION_FACTOR, "error_message": "replication factor"}
    if rf != -1:  # the factor asked for; -1: the broker's default (default_replication_factor)
        configs["replication.factor"] = str(rf)
    try:
        if validate_only:
            if name in {t.name for t in ctx.broker.list_topics()}:
                return {**out, "error_code": kerr.TOPIC_ALREADY_EXISTS, "error_message": f"{name} exists"}
            node = ctx.broker.cluster
            live = (len(node.metadata().brokers) or 1) if node is not None else rf
            if rf > live:
                msg = f"replication factor {rf} is larger than the number of live brokers ({live})"
                return {**out, "error_code": kerr.INVALID_REPLICATION_FACTOR, "error_message": msg}
            return {**out, "error_code": 0}
        info = ctx.broker.create_topic(name, n, configs)
    except TopiclakeError as exc:
        return {**out, "error_code": kerr.code_for(exc), "error_message": str(exc)}
    rf_now = info.config.replication_factor
    return {**out, "error_code": 0, "replication_factor": rf_now, "topic_id": topic_uuid(info), "configs": []}


async def create_topics(ctx: Context, req: Request) -> dict[str, Any]:
    """CreateTopics: partitions, configs and the replication factor as given (one above the live brokers:
    INVALID_REPLICATION_FACTOR); replicas are placed by the controller, rack-aware when brokers have racks."""
    validate = bool(getattr(req.body, "validate_only", False))
    results = [await ctx.run(_create_one, ctx, t, validate) for t in req.body.topics]
    return {"topics": results}


def _delete_one(ctx: Context, name: str | None, tid: uuid.UUID | None) -> dict[str, Any]:
    if name is None and tid is not None:
        name = next((t.name for t in ctx.broker.list_topics() if topic_uuid(t) == tid), None)
        if name is None:
            return {"name": None, "topic_id": tid, "error_code": 100, "error_message": "unknown topic id"}
    try:
        info = ctx.broker.delete_topic(str(name))
    except TopiclakeError as exc:
        return {"name": name, "error_code": kerr.code_for(exc), "error_message": str(exc)}
    return {"name": name, "topic_id": topic_uuid(info), "error_code": 0}


async def delete_topics(ctx: Context, req: Request) -> dict[str, Any]:
    """DeleteTopics, by name (v1-5) or name or id (v6)."""
    body = req.body
    if hasattr(body, "topic_names"):
        wanted = [(str(n), None) for n in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id if t.topic_id and t.topic_id.int else None) for t in body.topics]
    return {"responses": [await ctx.run(_delete_one, ctx, n, tid) for n, tid in wanted]}
