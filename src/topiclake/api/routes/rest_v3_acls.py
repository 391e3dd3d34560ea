"""Confluent REST Proxy v3 ACL routes: list, create (one or a batch) and delete ACLs of the cluster.

``GET|DELETE /v3/clusters/{cluster_id}/acls`` take Confluent's filter as query parameters
(``resource_type``, ``resource_name``, ``pattern_type``, ``principal``, ``host``, ``operation``,
``permission``; a missing enum is ``ANY``, ``pattern_type=MATCH`` selects every ACL that applies to the
named resource), ``POST /v3/clusters/{cluster_id}/acls`` creates one ACL from a body of the same fields,
``POST .../acls:batch`` several (``{"data": [...]}``). Listing needs Describe on the cluster, changing
needs Alter on the cluster (as Kafka's DescribeAcls/CreateAcls/DeleteAcls); the route table checks it.
The ACLs live in ``_system/acls`` (docs/security.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake.api.deps import BrokerDep, SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.http import negotiate, read_body, require_media
from topiclake.security import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    Security,
)

router = APIRouter(prefix="/v3", tags=["kafka-rest-v3"])

JSON = "application/json"
_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")
_ENUMS: dict[str, Any] = {
    "resource_type": ResourceType,
    "pattern_type": PatternType,
    "operation": Operation,
    "permission": Permission,
}


def _bad(message: str) -> HTTPError:
    return HTTPError(400, 400, message, code="bad_request")


def _enum(field: str, raw: Any, *, filtering: bool) -> Any:
    """Confluent's upper-case enum names (``TOPIC``, ``DESCRIBE_CONFIGS``) -> ours; ``ANY`` -> None."""
    if raw is None:
        if filtering:
            return None
        raise _bad(f"{field} is required")
    if not isinstance(raw, str):
        raise _bad(f"{field} must be a string")
    text = raw.strip().upper()
    if filtering and text == "ANY":
        return None
    if field == "pattern_type" and filtering and text == "MATCH":
        return "MATCH"
    kind = _ENUMS[field]
    member = kind.__members__.get(text)
    if member is None:
        names = ", ".join(kind.__members__)
        raise _bad(f"unknown {field} {raw!r}: one of {names}" + (", ANY" if filtering else ""))
    return member


def _text(field: str, raw: Any, *, default: str | None = None) -> str | None:
    if raw is None:
        return default
    if not isinstance(raw, str) or not raw:
        raise _bad(f"{field} must be a non-empty string")
    return raw


def _binding(doc: Any) -> AclBinding:
    if not isinstance(doc, dict):
        raise _bad("an ACL is an object with " + ", ".join(_FIELDS))
    principal = _text("principal", doc.get("principal"))
    if principal is None or ":" not in principal:
        raise _bad("principal is required, as <type>:<name> (User:alice, User:*)")
    rtype = _enum("resource_type", doc.get("resource_type"), filtering=False)
    name = _text("resource_name", doc.get("resource_name"))
    if rtype == ResourceType.CLUSTER:
        name = name or "kafka-cluster"
    if name is None:
        raise _bad("resource_name is required")
    return AclBinding(
        principal,
        _text("host", doc.get("host"), default="*") or "*",
        rtype,
        name,
        _enum("pattern_type", doc.get("pattern_type"), filtering=False),
        _enum("operation", doc.get("operation"), filtering=False),
        _enum("permission", doc.get("permission"), filtering=False),
    )


def _filter(request: Request) -> AclFilter:
    q = request.query_params
    pattern = _enum("pattern_type", q.get("pattern_type"), filtering=True)
    return AclFilter(
        principal=q.get("principal") or None,
        host=q.get("host") or None,
        resource_type=_enum("resource_type", q.get("resource_type"), filtering=True),
        resource_name=q.get("resource_name") or None,
        pattern_type=None if pattern == "MATCH" else pattern,
        operation=_enum("operation", q.get("operation"), filtering=True),
        permission=_enum("permission", q.get("permission"), filtering=True),
        match=pattern == "MATCH",
    )


def _acls_url(request: Request, cluster_id: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/v3/clusters/{cluster_id}/acls"


def acl_data(request: Request, cluster_id: str, b: AclBinding) -> dict[str, Any]:
    """Confluent's ``KafkaAcl`` body of one binding."""
    fields = {
        "resource_type": b.resource_type.name,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission.name,
    }
    return {
        "kind": "KafkaAcl",
        "metadata": {"self": f"{_acls_url(request, cluster_id)}?{urlencode(fields)}"},
        "cluster_id": cluster_id,
        **fields,
    }


def _security(request: Request) -> Security:
    sec: Security = request.app.state.security
    return sec


def _check(broker: Any, cluster_id: str) -> None:
    if cluster_id != broker.cluster_id:
        raise HTTPError(404, 404, f"Cluster {cluster_id} cannot be found.", code="cluster_not_found")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


async def _body(request: Request, settings: Any) -> Any:
    require_media(request, (JSON,))
    raw = await read_body(request, settings.max_request_bytes)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"the body is not valid JSON: {exc}") from None


@router.get("/clusters/{cluster_id}/acls", summary="Search ACLs (query parameters filter; missing = ANY)")
async def list_acls(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    negotiate(request, (JSON,))
    _check(broker, cluster_id)
    found = await run_in_threadpool(_security(request).authorizer.list, _filter(request))
    data = [acl_data(request, cluster_id, b) for b in found]
    self_url = _acls_url(request, cluster_id)
    return _json({"kind": "KafkaAclDataList", "metadata": {"self": self_url, "next": None}, "data": data})


@router.post("/clusters/{cluster_id}/acls", status_code=201, summary="Create an ACL")
async def create_acl(request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str) -> Response:
    _check(broker, cluster_id)
    binding = _binding(await _body(request, settings))
    await run_in_threadpool(_security(request).authorizer.add, [binding])
    return Response(status_code=201)


@router.post("/clusters/{cluster_id}/acls:batch", status_code=204, summary="Create several ACLs")
async def create_acls(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str
) -> Response:
    _check(broker, cluster_id)
    doc = await _body(request, settings)
    items = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise _bad('a batch is {"data": [ACL, ...]}')
    bindings = [_binding(item) for item in items]
    await run_in_threadpool(_security(request).authorizer.add, bindings)
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/acls", summary="Delete the ACLs the query parameters match")
async def delete_acls(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    negotiate(request, (JSON,))
    _check(broker, cluster_id)
    flt = _filter(request)
    removed = await run_in_threadpool(_security(request).authorizer.remove, flt)
    return _json({"data": [acl_data(request, cluster_id, b) for b in removed]})
