"""CreateAcls, DescribeAcls, DeleteAcls over the broker's Authorizer (the Delta table ``_system/acls``).

Alter on the cluster lets a principal create and delete ACLs, Describe on the cluster lets it list them
(Kafka's rules); otherwise CLUSTER_AUTHORIZATION_FAILED. The wire's enums are Kafka's numbers.
"""

from __future__ import annotations

from typing import Any

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.authz import allowed
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.security import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)

_ANY = 1
_MATCH = 2
RESOURCE_TYPES = {
    2: ResourceType.TOPIC,
    3: ResourceType.GROUP,
    4: ResourceType.CLUSTER,
    5: ResourceType.TRANSACTIONAL_ID,
}
PATTERN_TYPES = {3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS = {
    2: Operation.ALL,
    3: Operation.READ,
    4: Operation.WRITE,
    5: Operation.CREATE,
    6: Operation.DELETE,
    7: Operation.ALTER,
    8: Operation.DESCRIBE,
    9: Operation.CLUSTER_ACTION,
    10: Operation.DESCRIBE_CONFIGS,
    11: Operation.ALTER_CONFIGS,
    12: Operation.IDEMPOTENT_WRITE,
}
PERMISSIONS = {2: Permission.DENY, 3: Permission.ALLOW}


def _code(table: dict[int, Any], value: Any) -> int:
    return next(k for k, v in table.items() if v == value)


def _wire(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": _code(RESOURCE_TYPES, b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": _code(PATTERN_TYPES, b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": _code(OPERATIONS, b.operation),
        "permission_type": _code(PERMISSIONS, b.permission),
    }


def _binding(c: Any) -> AclBinding:
    """An AclBinding from a creation; ValueError when a field is ANY/UNKNOWN or the principal is bad."""
    rtype = RESOURCE_TYPES.get(int(c.resource_type))
    pattern = PATTERN_TYPES.get(int(getattr(c, "resource_pattern_type", 3)))
    op = OPERATIONS.get(int(c.operation))
    perm = PERMISSIONS.get(int(c.permission_type))
    if rtype is None or pattern is None or op is None or perm is None:
        raise ValueError("resource type, pattern type, operation and permission must be specific")
    Principal.parse(str(c.principal))
    if not c.resource_name or not c.host:
        raise ValueError("resource name and host must not be empty")
    if rtype == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        raise ValueError(f"the cluster resource is named {CLUSTER_NAME}")
    return AclBinding(str(c.principal), str(c.host), rtype, str(c.resource_name), pattern, op, perm)


def _filter(f: Any) -> AclFilter:
    """The AclFilter of a Describe/Delete filter (Kafka's ANY = 1, MATCH = 2: ``AclFilter.match``).

    Raises:
        ValueError: An enum value is unknown.
    """
    rtype_code, pattern_code = int(f.resource_type_filter), int(getattr(f, "pattern_type_filter", 3))
    op_code, perm_code = int(f.operation), int(f.permission_type)
    rtype = None if rtype_code == _ANY else RESOURCE_TYPES.get(rtype_code)
    op = None if op_code == _ANY else OPERATIONS.get(op_code)
    perm = None if perm_code == _ANY else PERMISSIONS.get(perm_code)
    pattern = None if pattern_code in (_ANY, _MATCH) else PATTERN_TYPES.get(pattern_code)
    if (rtype_code != _ANY and rtype is None) or (op_code != _ANY and op is None):
        raise ValueError("unknown resource type or operation")
    if (perm_code != _ANY and perm is None) or (pattern_code not in (_ANY, _MATCH) and pattern is None):
        raise ValueError("unknown permission or pattern type")
    return AclFilter(
        principal=f.principal_filter,
        host=f.host_filter,
        resource_type=rtype,
        resource_name=f.resource_name_filter,
        pattern_type=pattern,
        operation=op,
        permission=perm,
        match=pattern_code == _MATCH,
    )


def _select(ctx: Context, f: Any) -> list[AclBinding]:
    """The bindings a Describe/Delete filter selects (ValueError: an enum value is unknown)."""
    return ctx.security.authorizer.list(_filter(f))


async def create_acls(ctx: Context, req: Request) -> dict[str, Any]:
    """CreateAcls: Alter on the cluster; each creation answered on its own."""
    if not allowed(ctx, req, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = kerr.CLUSTER_AUTHORIZATION_FAILED
        return {
            "results": [
                {"error_code": code, "error_message": "Authorization failed."} for _ in req.body.creations
            ]
        }
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in req.body.creations:
        try:
            valid.append(_binding(c))
            results.append({"error_code": 0, "error_message": None})
        except ValueError as exc:
            results.append({"error_code": kerr.INVALID_REQUEST, "error_message": str(exc)})
    if valid:
        try:
            await ctx.run(ctx.security.authorizer.add, valid)
        except TopiclakeError as exc:
            code = kerr.SECURITY_DISABLED if "no ACL table" in exc.message else kerr.code_for(exc)
            return {"results": [{"error_code": code, "error_message": exc.message} for _ in results]}
    return {"results": results}


def _grouped(bindings: list[AclBinding]) -> list[dict[str, Any]]:
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return [
        {
            "resource_type": _code(RESOURCE_TYPES, rt),
            "resource_name": name,
            "pattern_type": _code(PATTERN_TYPES, pt),
            "acls": [
                {
                    k: v
                    for k, v in _wire(b).items()
                    if k in ("principal", "host", "operation", "permission_type")
                }
                for b in acls
            ],
        }
        for (rt, name, pt), acls in sorted(by_resource.items())
    ]


async def describe_acls(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeAcls: Describe on the cluster; the bindings the filter selects, grouped by resource."""
    if not allowed(ctx, req, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": kerr.CLUSTER_AUTHORIZATION_FAILED, "error_message": "Authorization failed."}
    try:
        found = await ctx.run(_select, ctx, req.body)
    except ValueError as exc:
        return {"error_code": kerr.INVALID_REQUEST, "error_message": str(exc), "resources": []}
    except TopiclakeError as exc:
        return {"error_code": kerr.SECURITY_DISABLED, "error_message": exc.message, "resources": []}
    return {"error_code": 0, "error_message": None, "resources": _grouped(found)}


def _delete_sync(ctx: Context, f: Any) -> dict[str, Any]:
    try:
        flt = _filter(f)
    except ValueError as exc:
        return {"error_code": kerr.INVALID_REQUEST, "error_message": str(exc), "matching_acls": []}
    removed = ctx.security.authorizer.remove(flt)  # one commit, MATCH filters too
    matching = [{"error_code": 0, "error_message": None, **_wire(b)} for b in removed]
    return {"error_code": 0, "error_message": None, "matching_acls": matching}


async def delete_acls(ctx: Context, req: Request) -> dict[str, Any]:
    """DeleteAcls: Alter on the cluster; each filter answered with the bindings it removed."""
    if not allowed(ctx, req, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = kerr.CLUSTER_AUTHORIZATION_FAILED
        return {
            "filter_results": [
                {"error_code": code, "error_message": "Authorization failed.", "matching_acls": []}
                for _ in req.body.filters
            ]
        }
    try:
        return {"filter_results": [await ctx.run(_delete_sync, ctx, f) for f in req.body.filters]}
    except TopiclakeError as exc:
        failed = {"error_code": kerr.SECURITY_DISABLED, "error_message": exc.message, "matching_acls": []}
        return {"filter_results": [failed for _ in req.body.filters]}
