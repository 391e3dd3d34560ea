"""ACL checks of every Kafka API, around the handlers (which stay unaware of them).

With auth off nothing here runs. With auth on, each request is checked the way Kafka's ``KafkaApis``
checks it, as the connection's principal from its host:

- whole-request checks (a group, the cluster) answer the API's error at once, without the handler;
- per-topic (per-group) checks take the denied topics out of the request, run the handler on the rest and
  add the denied ones to the answer with TOPIC_AUTHORIZATION_FAILED (GROUP_AUTHORIZATION_FAILED); clients
  match answers by name, as Kafka's own answers merge authorized and unauthorized parts;
- listings (Metadata of all topics, ListGroups, OffsetFetch of all topics) leave out what the principal
  may not Describe, so nobody learns the names of topics they may not see. A topic named explicitly
  but not describable is answered TOPIC_AUTHORIZATION_FAILED whether or not it exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from topiclake.kafka import authz_txn
from topiclake.kafka import errors as kerr
from topiclake.kafka.codec import Request
from topiclake.kafka.context import ConnectionState, Context
from topiclake.security import CLUSTER_NAME, Operation, ResourceType

Handler = Callable[[Context, Request], Awaitable[dict[str, Any] | None]]

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_TOPIC_FAIL = kerr.TOPIC_AUTHORIZATION_FAILED
_GROUP_FAIL = kerr.GROUP_AUTHORIZATION_FAILED
_CLUSTER_FAIL = kerr.CLUSTER_AUTHORIZATION_FAILED
_CONFIG_TOPIC, _CONFIG_BROKER = 2, 4


def allowed(ctx: Context, req: Request, op: Operation, rtype: ResourceType, name: str) -> bool:
    """Whether the request's connection may perform ``op`` on the resource (always, with auth off)."""
    if not ctx.security.auth:
        return True
    conn: ConnectionState = req.connection
    return ctx.security.authorizer.authorize(conn.principal, conn.host, op, rtype, name)


def _cluster(ctx: Context, req: Request, op: Operation) -> bool:
    return allowed(ctx, req, op, C, CLUSTER_NAME)


@dataclasses.dataclass(frozen=True)
class _Split:
    """Where the topics are in a request and its answer, and what a denied partition's answer holds."""

    op: Operation
    req_list: str
    req_name: str
    req_parts: str | None
    resp_list: str
    resp_name: str
    resp_parts: str | None
    resp_index: str | None
    extra: tuple[tuple[str, Any], ...] = ()
    rtype: ResourceType = T
    code: int = _TOPIC_FAIL
    may: Callable[[Context, Request, str], bool] | None = None


_FETCH_EXTRA = (
    ("high_watermark", -1),
    ("last_stable_offset", -1),
    ("log_start_offset", -1),
    ("records", b""),
)
_SPLITS: dict[int, _Split] = {
    0: _Split(
        Operation.WRITE,
        "topic_data",
        "name",
        "partition_data",
        "responses",
        "name",
        "partition_responses",
        "index",
        (("base_offset", -1), ("log_append_time", -1)),
    ),
    1: _Split(
        Operation.READ,
        "topics",
        "topic",
        "partitions",
        "responses",
        "topic",
        "partitions",
        "partition_index",
        _FETCH_EXTRA,
    ),
    2: _Split(
        Operation.DESCRIBE,
        "topics",
        "name",
        "partitions",
        "topics",
        "name",
        "partitions",
        "partition_index",
        (("timestamp", -1), ("offset", -1)),
    ),
    8: _Split(
        Operation.READ, "topics", "name", "partitions", "topics", "name", "partitions", "partition_index"
    ),
    9: _Split(
        Operation.DESCRIBE,
        "topics",
        "name",
        "partition_indexes",
        "topics",
        "name",
        "partitions",
        "partition_index",
        (("committed_offset", -1), ("metadata", "")),
    ),
    47: _Split(
        Operation.READ, "topics", "name", "partitions", "topics", "name", "partitions", "partition_index"
    ),
    19: _Split(
        Operation.CREATE,
        "topics",
        "name",
        None,
        "topics",
        "name",
        None,
        None,
        (("num_partitions", -1), ("replication_factor", -1), ("error_message", "Authorization failed.")),
        may=lambda ctx, req, name: (
            _cluster(ctx, req, Operation.CREATE) or allowed(ctx, req, Operation.CREATE, T, name)
        ),
    ),
    20: _Split(Operation.DELETE, "topics", "name", None, "responses", "name", None, None),
    37: _Split(
        Operation.ALTER,
        "topics",
        "name",
        None,
        "results",
        "name",
        None,
        None,
        (("error_message", "Authorization failed."),),
    ),
    61: _Split(
        Operation.READ,
        "topics",
        "name",
        "partition_indexes",
        "topics",
        "name",
        "partitions",
        "partition_index",
        (("error_message", "Authorization failed."), ("active_producers", [])),
    ),
    42: _Split(
        Operation.DELETE, "groups_names", "", None, "results", "group_id", None, None, (), G, _GROUP_FAIL
    ),
}


def _index(part: Any) -> int:
    if isinstance(part, int):
        return part
    for key in ("partition", "partition_index", "index"):
        if hasattr(part, key):
            return int(getattr(part, key))
    raise AttributeError("no partition index")


def _denied_entry(spec: _Split, name: Any, item: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {spec.resp_name: name, "error_code": spec.code, **dict(spec.extra)}
    if spec.resp_parts is not None and spec.req_parts is not None:
        entry[spec.resp_parts] = [
            {spec.resp_index: _index(p), "error_code": spec.code, **dict(spec.extra)}
            for p in getattr(item, spec.req_parts)
        ]
        for key, _value in spec.extra:
            entry.pop(key, None)
    return entry


async def _split(ctx: Context, req: Request, handler: Handler, spec: _Split) -> dict[str, Any] | None:
    body = req.body
    field = spec.req_list
    if req.api_key == 20 and hasattr(body, "topic_names"):  # DeleteTopics v1-5: a list of names
        field = "topic_names"
    items = getattr(body, field)
    if items is None:  # "all" (OffsetFetch): filtered in the answer instead
        return await handler(ctx, req)
    may = spec.may or (lambda c, r, name: allowed(c, r, spec.op, spec.rtype, name))
    kept: list[tuple[Any, Any]] = []
    denied: list[tuple[Any, Any]] = []
    for item in items:
        name = item if isinstance(item, str) else getattr(item, spec.req_name)
        (kept if name is not None and may(ctx, req, str(name)) else denied).append((name, item))
    if not denied:
        return await handler(ctx, req)
    if not kept and req.api_key == 1:  # nothing left to fetch: no long poll
        out: dict[str, Any] | None = {"error_code": 0, "session_id": 0, spec.resp_list: []}
    else:
        narrowed = dataclasses.replace(body, **{field: tuple(i for _n, i in kept)})
        out = await handler(ctx, dataclasses.replace(req, body=narrowed))
    if out is None:  # acks=0
        return None
    out[spec.resp_list] = list(out.get(spec.resp_list) or []) + [_denied_entry(spec, n, i) for n, i in denied]
    return out


def failed_answer(req: Request, code: int) -> dict[str, Any] | None:
    """The answer to a request that failed as a whole: ``code`` on every topic and partition it named.

    A client matches a produce or fetch answer by topic and partition: an answer without them is a
    malformed one to librdkafka ("Local: Bad message format"), so such APIs repeat what was asked, as
    Kafka's own ``getErrorResponse`` does. Other APIs carry the code at the top. A produce request with
    acks=0 gets no answer (None), failed or not.
    """
    if req.api_key == 0 and int(req.body.acks) == 0:
        return None
    spec = _SPLITS.get(req.api_key)
    items = None if spec is None else getattr(req.body, spec.req_list, None)
    if spec is None or items is None or req.api_key == 42:
        return {"error_code": code}
    spec = dataclasses.replace(spec, code=code)
    entries = [
        _denied_entry(spec, item if isinstance(item, str) else getattr(item, spec.req_name), item)
        for item in items
    ]
    out: dict[str, Any] = {spec.resp_list: entries}
    if req.api_key == 1:  # Fetch has a top-level code too
        out.update(error_code=code, session_id=0)
    return out


def _metadata_filter(ctx: Context, req: Request, out: dict[str, Any]) -> dict[str, Any]:
    listing = req.body.topics is None or (req.version == 0 and not req.body.topics)
    topics = []
    for t in out.get("topics", []):
        name = t.get("name")
        if name is not None and allowed(ctx, req, Operation.DESCRIBE, T, str(name)):
            topics.append(t)
        elif not listing:
            topics.append({**t, "error_code": _TOPIC_FAIL, "partitions": [], "is_internal": False})
    out["topics"] = topics
    return out


def _configs(ctx: Context, req: Request, op: Operation, r: Any) -> int:
    if int(r.resource_type) == _CONFIG_BROKER:
        return 0 if _cluster(ctx, req, op) else _CLUSTER_FAIL
    if int(r.resource_type) == _CONFIG_TOPIC and not allowed(ctx, req, op, T, str(r.resource_name)):
        return _TOPIC_FAIL
    return 0


async def _config_split(
    ctx: Context, req: Request, handler: Handler, op: Operation, key: str
) -> dict[str, Any]:
    codes = [(r, _configs(ctx, req, op, r)) for r in req.body.resources]
    kept = tuple(r for r, code in codes if code == 0)
    out = await handler(ctx, dataclasses.replace(req, body=dataclasses.replace(req.body, resources=kept)))
    assert out is not None
    denied = [
        {
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "error_code": code,
            "error_message": "Authorization failed.",
            "configs": [],
        }
        for r, code in codes
        if code != 0
    ]
    out[key] = list(out.get(key) or []) + denied
    return out


def _group_gate(ctx: Context, req: Request) -> dict[str, Any] | None:
    """The answer of a request refused on its group (None: allowed)."""
    b = req.body
    key = req.api_key
    if key == 10:
        if int(getattr(b, "key_type", 0)) != 0 or allowed(ctx, req, Operation.DESCRIBE, G, str(b.key)):
            return None
        return {"error_code": _GROUP_FAIL, "node_id": -1, "host": "", "port": -1}
    op = {9: Operation.DESCRIBE, 47: Operation.DELETE}.get(key, Operation.READ)
    if allowed(ctx, req, op, G, str(b.group_id)):
        return None
    if key == 11:
        return {"error_code": _GROUP_FAIL, "generation_id": -1, "leader": "", "member_id": b.member_id}
    if key == 14:
        return {"error_code": _GROUP_FAIL, "assignment": b""}
    if key in (8, 9):
        topics = [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": _index(p),
                        "error_code": _GROUP_FAIL,
                        "committed_offset": -1,
                        "metadata": "",
                    }
                    for p in (t.partitions if key == 8 else t.partition_indexes)
                ],
            }
            for t in (b.topics or ())
        ]
        return {"error_code": _GROUP_FAIL, "topics": topics}
    return {"error_code": _GROUP_FAIL, "topics": [], "members": []}


_GROUP_KEYS = frozenset({8, 9, 10, 11, 12, 13, 14, 47, 68})  # 68: ConsumerGroupHeartbeat, Read as Kafka


async def guarded(ctx: Context, req: Request, handler: Handler) -> dict[str, Any] | None:
    """Run ``handler`` under the ACLs of its API (straight through with auth off)."""
    if not ctx.security.auth:
        return await handler(ctx, req)
    key = req.api_key
    if key in authz_txn.KEYS:
        refused = authz_txn.refused(ctx, req)
        if refused is not None:
            return refused
    if key in _GROUP_KEYS:
        refused = _group_gate(ctx, req)
        if refused is not None:
            return refused
    if key == 22 and req.body.transactional_id is None:  # InitProducerId (idempotent producer)
        conn: ConnectionState = req.connection
        if not (
            _cluster(ctx, req, Operation.IDEMPOTENT_WRITE)
            or ctx.security.authorizer.authorize_any(conn.principal, conn.host, Operation.WRITE, T)
        ):
            return {"error_code": _CLUSTER_FAIL, "producer_id": -1, "producer_epoch": -1}
    if key == 27 and not _cluster(ctx, req, Operation.CLUSTER_ACTION):  # WriteTxnMarkers, as Kafka
        return authz_txn.markers_refused(req.body, _CLUSTER_FAIL)
    if key in _SPLITS:
        out = await _split(ctx, req, handler, _SPLITS[key])
        if key == 9 and out is not None and req.body.topics is None:
            out["topics"] = [
                t for t in out.get("topics", []) if allowed(ctx, req, Operation.DESCRIBE, T, t["name"])
            ]
        return out
    if key == 32:
        return await _config_split(ctx, req, handler, Operation.DESCRIBE_CONFIGS, "results")
    if key in (33, 44):
        return await _config_split(ctx, req, handler, Operation.ALTER_CONFIGS, "responses")
    out = await handler(ctx, req)
    if out is None:
        return None
    if key == 3:
        return _metadata_filter(ctx, req, out)
    if key in (65, 66):
        return authz_txn.filter_answer(ctx, req, out)
    if key == 69:  # ConsumerGroupDescribe: Describe on each group
        out["groups"] = [
            g
            if allowed(ctx, req, Operation.DESCRIBE, G, g["group_id"])
            else {"group_id": g["group_id"], "error_code": _GROUP_FAIL, "group_state": "", "members": []}
            for g in out.get("groups", [])
        ]
    if key == 15:  # DescribeGroups
        out["groups"] = [
            g
            if allowed(ctx, req, Operation.DESCRIBE, G, g["group_id"])
            else {
                "group_id": g["group_id"],
                "error_code": _GROUP_FAIL,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
            for g in out.get("groups", [])
        ]
    if key == 16 and not _cluster(ctx, req, Operation.DESCRIBE):  # ListGroups
        out["groups"] = [
            g for g in out.get("groups", []) if allowed(ctx, req, Operation.DESCRIBE, G, g["group_id"])
        ]
    return out
