"""DescribeClientQuotas (48) and AlterClientQuotas (49) over the broker's ``_system/quotas`` table.

Kafka's rules: describing needs DescribeConfigs on the cluster, altering AlterConfigs on the cluster
(else CLUSTER_AUTHORIZATION_FAILED). topiclake keeps quotas per *user* entity (a user name, or the default
user with a null name); entities of other types (``client-id``, ``ip``) are refused on alter with
INVALID_REQUEST and never match on describe. Keys: ``producer_byte_rate``, ``consumer_byte_rate`` and
topiclake's ``request_rate`` (docs/quotas.md).
"""

from __future__ import annotations

from typing import Any

from topiclake.errors import InvalidRequest, TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.authz import allowed
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.security import CLUSTER_NAME, Operation, ResourceType
from topiclake.security.quota_table import USER, QuotaChange, QuotaMap

_EXACT, _DEFAULT, _ANY = 0, 1, 2
_DENIED = "Authorization failed."
_NO_STORE = "this broker keeps no quota table"


def _entity(user: str | None) -> list[dict[str, Any]]:
    return [{"entity_type": USER, "entity_name": user}]


def _matches(user: str | None, components: Any, strict: bool) -> bool:
    """Whether the user entity ``user`` passes Kafka's DescribeClientQuotas filter."""
    if strict and len(components) != 1:
        return False  # strict: exactly the component types given, and ours have only "user"
    for c in components:
        if str(c.entity_type) != USER:
            return False  # the entity has no such component
        match_type = int(c.match_type)
        if match_type == _EXACT and (user is None or user != c.match):
            return False
        if match_type == _DEFAULT and user is not None:
            return False
    return True


def _describe_sync(ctx: Context, components: Any, strict: bool) -> list[dict[str, Any]]:
    assert ctx.quota_store is not None
    found: QuotaMap = ctx.quota_store.describe()
    return [
        {
            "entity": _entity(user),
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for user, values in sorted(found.items(), key=lambda kv: (kv[0] is not None, kv[0] or ""))
        if _matches(user, components, strict)
    ]


async def describe_client_quotas(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeClientQuotas: DescribeConfigs on the cluster; the user entities the filter selects."""
    if not allowed(ctx, req, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": kerr.CLUSTER_AUTHORIZATION_FAILED, "error_message": _DENIED, "entries": None}
    if ctx.quota_store is None:
        return {"error_code": kerr.UNKNOWN_SERVER_ERROR, "error_message": _NO_STORE, "entries": None}
    for c in req.body.components:
        if int(c.match_type) not in (_EXACT, _DEFAULT, _ANY):
            message = f"unknown match type {c.match_type}"
            return {"error_code": kerr.INVALID_REQUEST, "error_message": message, "entries": None}
    try:
        entries = await ctx.run(_describe_sync, ctx, req.body.components, bool(req.body.strict))
    except TopiclakeError as exc:
        return {"error_code": kerr.code_for(exc), "error_message": exc.message, "entries": None}
    return {"error_code": 0, "error_message": None, "entries": entries}


def _changes(entry: Any) -> list[QuotaChange]:
    """The changes of one AlterClientQuotas entry.

    Raises:
        TopiclakeError: InvalidRequest for an entity that is not one user; InvalidConfig for a bad op.
    """
    entity = list(entry.entity)
    if len(entity) != 1 or str(entity[0].entity_type) != USER:
        kinds = "+".join(str(e.entity_type) for e in entity) or "none"
        raise InvalidRequest(f"topiclake keeps client quotas per user only, not per {kinds}")
    user = entity[0].entity_name
    changes = [QuotaChange(user, str(op.key), None if op.remove else float(op.value)) for op in entry.ops]
    for c in changes:
        c.check()
    return changes


def _answer(entry: Any, code: int = 0, message: str | None = None) -> dict[str, Any]:
    entity = [{"entity_type": str(e.entity_type), "entity_name": e.entity_name} for e in entry.entity]
    return {"error_code": code, "error_message": message, "entity": entity}


async def alter_client_quotas(ctx: Context, req: Request) -> dict[str, Any]:
    """AlterClientQuotas: AlterConfigs on the cluster; the valid entries written in one commit (unless
    ``validate_only``), each entry answered on its own."""
    if not allowed(ctx, req, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        code = kerr.CLUSTER_AUTHORIZATION_FAILED
        return {"entries": [_answer(e, code, _DENIED) for e in req.body.entries]}
    if ctx.quota_store is None:
        return {"entries": [_answer(e, kerr.UNKNOWN_SERVER_ERROR, _NO_STORE) for e in req.body.entries]}
    answers: list[dict[str, Any]] = []
    valid: list[QuotaChange] = []
    for entry in req.body.entries:
        try:
            valid += _changes(entry)
            answers.append(_answer(entry))
        except TopiclakeError as exc:
            answers.append(_answer(entry, kerr.code_for(exc), exc.message))
    if valid and not req.body.validate_only:
        store = ctx.quota_store
        try:
            await ctx.run(store.alter, valid, f"AlterClientQuotas by {req.connection.principal}")
        except TopiclakeError as exc:
            code = kerr.code_for(exc)
            return {
                "entries": [
                    a if a["error_code"] else {**a, "error_code": code, "error_message": exc.message}
                    for a in answers
                ]
            }
    return {"entries": answers}
