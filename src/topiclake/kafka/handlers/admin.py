"""CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs (topic resources)."""

from __future__ import annotations

from typing import Any

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.platform.catalog.topic_config import DEFAULTS

TOPIC = 2
BROKER = 4
_DYNAMIC_TOPIC_CONFIG = 1
_DEFAULT_CONFIG = 5
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


def _create_partitions_sync(ctx: Context, body: Any) -> list[dict[str, Any]]:
    out = []
    for t in body.topics:
        name = str(t.name)
        try:
            if body.validate_only:
                info = ctx.broker.describe_topic(name)
                if int(t.count) <= info.partitions:
                    msg = f"{name} has {info.partitions} partitions"
                    out.append({"name": name, "error_code": kerr.INVALID_PARTITIONS, "error_message": msg})
                    continue
            else:
                ctx.broker.increase_partitions(name, int(t.count))
        except TopiclakeError as exc:
            out.append({"name": name, "error_code": kerr.code_for(exc), "error_message": str(exc)})
            continue
        out.append({"name": name, "error_code": 0})
    return out


async def create_partitions(ctx: Context, req: Request) -> dict[str, Any]:
    """CreatePartitions: grow topics (never shrink)."""
    return {"results": await ctx.run(_create_partitions_sync, ctx, req.body)}


def _config_type(name: str, value: str) -> int:
    if name == "cleanup.policy":
        return 7  # LIST
    return 5 if value.lstrip("-").isdigit() else 2  # LONG or STRING


def _describe_sync(ctx: Context, body: Any) -> list[dict[str, Any]]:
    results = []
    for r in body.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        if int(r.resource_type) == BROKER:
            results.append({**base, "error_code": 0, "configs": []})
            continue
        if int(r.resource_type) != TOPIC:
            results.append(
                {**base, "error_code": kerr.INVALID_REQUEST, "error_message": "unsupported resource"}
            )
            continue
        try:
            info = ctx.broker.describe_topic(str(r.resource_name))
        except TopiclakeError as exc:
            results.append({**base, "error_code": kerr.code_for(exc), "error_message": str(exc)})
            continue
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        overrides = info.config.overrides()
        configs = []
        for name, value in sorted(info.config.to_kafka().items()):
            if keys is not None and name not in keys:
                continue
            source = _DYNAMIC_TOPIC_CONFIG if name in overrides else _DEFAULT_CONFIG
            configs.append(
                {
                    "name": name,
                    "value": value,
                    "read_only": False,
                    "config_source": source,
                    "is_default": source == _DEFAULT_CONFIG,
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": _config_type(name, value),
                }
            )
        results.append({**base, "error_code": 0, "configs": configs})
    return results


async def describe_configs(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeConfigs: a topic's configs (overrides as DYNAMIC_TOPIC_CONFIG); brokers have none to show."""
    return {"results": await ctx.run(_describe_sync, ctx, req.body)}


def _alter_one(ctx: Context, r: Any, validate_only: bool, incremental: bool) -> dict[str, Any]:
    base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
    if int(r.resource_type) != TOPIC:
        return {**base, "error_code": kerr.INVALID_REQUEST, "error_message": "only topic configs can change"}
    name = str(r.resource_name)
    try:
        info = ctx.broker.describe_topic(name)
        current = info.config.to_kafka()
        sets: dict[str, str | int] = {}
        deletes: list[str] = []
        if not incremental:  # AlterConfigs replaces the whole set of overrides
            given = {str(c.name): c.value for c in r.configs}
            sets = {k: v for k, v in given.items() if v is not None}
            deletes = [k for k in info.config.overrides() if k not in sets]
        else:
            for c in r.configs:
                op, key = int(c.config_operation), str(c.name)
                if op == _SET and c.value is not None:
                    sets[key] = c.value
                elif op == _DELETE:
                    deletes.append(key)
                elif op in (_APPEND, _SUBTRACT) and key == "cleanup.policy" and c.value is not None:
                    items = [x for x in current.get(key, DEFAULTS[key]).split(",") if x]
                    for v in c.value.split(","):
                        if op == _APPEND and v not in items:
                            items.append(v)
                        elif op == _SUBTRACT and v in items:
                            items.remove(v)
                    sets[key] = ",".join(items) or "delete"
                else:
                    msg = f"operation {op} is not supported for {key}"
                    return {**base, "error_code": kerr.INVALID_CONFIG, "error_message": msg}
        if validate_only:
            info.config.with_changes(sets, deletes)
        else:
            ctx.broker.alter_topic_configs(name, sets, deletes)
    except TopiclakeError as exc:
        return {**base, "error_code": kerr.code_for(exc), "error_message": str(exc)}
    return {**base, "error_code": 0}


async def alter_configs(ctx: Context, req: Request) -> dict[str, Any]:
    """AlterConfigs: the topic's overrides become exactly the ones given."""
    b = req.body
    return {
        "responses": [await ctx.run(_alter_one, ctx, r, bool(b.validate_only), False) for r in b.resources]
    }


async def incremental_alter_configs(ctx: Context, req: Request) -> dict[str, Any]:
    """IncrementalAlterConfigs: SET, DELETE, and APPEND/SUBTRACT on ``cleanup.policy``."""
    b = req.body
    return {
        "responses": [await ctx.run(_alter_one, ctx, r, bool(b.validate_only), True) for r in b.resources]
    }
