"""The schema registry's HTTP listener: Confluent Schema Registry's REST API as a FastAPI app.

Served on its own port (``--schema-registry-port``, 8081 by default) by ``topiclake serve``. Errors answer
``{"error_code", "message"}`` with Confluent's codes; the HTTP status is the code's first three digits.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

import topiclake
from topiclake import errors as e
from topiclake.schema_registry import errors as sr
from topiclake.schema_registry._paths import SlashedSubjects, SubjectRoute
from topiclake.schema_registry.formats import SCHEMA_TYPES
from topiclake.schema_registry.registry import SchemaRegistry
from topiclake.schema_registry.store import StoredSchema

logger = logging.getLogger(__name__)

__all__ = ["MEDIA_TYPE", "create_registry_app"]

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
_T = TypeVar("_T")

router = APIRouter(route_class=SubjectRoute)


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=MEDIA_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


async def _call(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await run_in_threadpool(fn, *args, **kwargs)


def _registry(request: Request) -> SchemaRegistry:
    registry: SchemaRegistry = request.app.state.schema_registry
    return registry


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        doc = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise e.InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise e.InvalidRequest("request body must be a JSON object")
    return doc


def _schema_id(raw: str) -> int:
    if raw.isascii() and raw.isdigit() and len(raw) < 12:
        return int(raw)
    raise sr.SchemaNotFound(f"Schema {raw[:20]} not found")


# ------------------------------------------------------------------ root and schemas


@router.get("/")
def root() -> Response:
    return _json({})


@router.get("/contexts")
def contexts() -> Response:
    return _json(["."])  # one (the default) context


@router.get("/schemas")
async def list_schemas(request: Request) -> Response:
    registry = _registry(request)
    prefix = request.query_params.get("subjectPrefix", "")
    latest_only = _flag(request, "latestOnly")

    def collect() -> list[dict[str, Any]]:
        out = []
        for subject in registry.subjects(prefix=prefix):
            versions = registry.versions(subject)
            for v in versions[-1:] if latest_only else versions:
                out.append(registry.get_version(subject, v).to_json())
        return out

    return _json(await _call(collect))


@router.get("/schemas/types")
def schema_types() -> Response:
    return _json(sorted(SCHEMA_TYPES))


def _text(request: Request, stored: StoredSchema) -> str:
    """The schema in the ``format`` asked for: ``serialized`` gives a Protobuf schema as a base64
    ``FileDescriptorProto`` (what Confluent's Protobuf deserializers ask for)."""
    if request.query_params.get("format") == "serialized" and stored.schema_type == "PROTOBUF":
        parsed = _registry(request).parsed(stored.schema_id)
        return base64.b64encode(parsed.descriptor().SerializeToString()).decode()  # type: ignore[attr-defined]
    return stored.schema


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(schema_id: str, request: Request) -> Response:
    stored = await _call(_registry(request).schema_by_id, _schema_id(schema_id))
    body: dict[str, Any] = {"schema": await _call(_text, request, stored)}
    if stored.schema_type != "AVRO":
        body["schemaType"] = stored.schema_type
    if stored.references:
        body["references"] = [r.to_json() for r in stored.references]
    return _json(body)


@router.get("/schemas/ids/{schema_id}/schema")
async def raw_schema_by_id(schema_id: str, request: Request) -> Response:
    stored = await _call(_registry(request).schema_by_id, _schema_id(schema_id))
    return Response(stored.schema, media_type=MEDIA_TYPE)


@router.get("/schemas/ids/{schema_id}/versions")
async def versions_of_id(schema_id: str, request: Request) -> Response:
    pairs = await _call(_registry(request).versions_of_id, _schema_id(schema_id))
    return _json([{"subject": s, "version": v} for s, v in pairs])


@router.get("/schemas/ids/{schema_id}/subjects")
async def subjects_of_id(schema_id: str, request: Request) -> Response:
    pairs = await _call(_registry(request).versions_of_id, _schema_id(schema_id))
    return _json(sorted({s for s, _ in pairs}))


# ------------------------------------------------------------------ subjects


@router.get("/subjects")
async def list_subjects(request: Request) -> Response:
    prefix = request.query_params.get("subjectPrefix", "")
    return _json(await _call(_registry(request).subjects, _flag(request, "deleted"), prefix))


@router.get("/subjects/{subject}/versions")
async def list_versions(subject: str, request: Request) -> Response:
    return _json(await _call(_registry(request).versions, subject, _flag(request, "deleted")))


@router.post("/subjects/{subject}/versions")
async def register(subject: str, request: Request) -> Response:
    doc = await _body(request)
    sid = await _call(
        _registry(request).register,
        subject,
        doc.get("schema"),
        doc.get("schemaType"),
        doc.get("references"),
        _flag(request, "normalize"),
    )
    return _json({"id": sid})


@router.get("/subjects/{subject}/versions/{version}")
async def get_version(subject: str, version: str, request: Request) -> Response:
    found = await _call(_registry(request).get_version, subject, version, _flag(request, "deleted"))
    return _json({**found.to_json(), "schema": await _call(_text, request, found.schema)})


@router.get("/subjects/{subject}/versions/{version}/schema")
async def get_raw_version(subject: str, version: str, request: Request) -> Response:
    found = await _call(_registry(request).get_version, subject, version, _flag(request, "deleted"))
    return Response(found.schema.schema, media_type=MEDIA_TYPE)


@router.get("/subjects/{subject}/versions/{version}/referencedby")
async def referenced_by(subject: str, version: str, request: Request) -> Response:
    return _json(await _call(_registry(request).referenced_by, subject, version))


@router.delete("/subjects/{subject}/versions/{version}")
async def delete_version(subject: str, version: str, request: Request) -> Response:
    return _json(
        await _call(_registry(request).delete_version, subject, version, _flag(request, "permanent"))
    )


@router.post("/subjects/{subject}")
async def lookup(subject: str, request: Request) -> Response:
    doc = await _body(request)
    found = await _call(
        _registry(request).lookup,
        subject,
        doc.get("schema"),
        doc.get("schemaType"),
        doc.get("references"),
        _flag(request, "deleted"),
    )
    return _json(found.to_json())


@router.delete("/subjects/{subject}")
async def delete_subject(subject: str, request: Request) -> Response:
    return _json(await _call(_registry(request).delete_subject, subject, _flag(request, "permanent")))


# ------------------------------------------------------------------ compatibility


async def _compatibility(subject: str, version: str | None, request: Request) -> Response:
    doc = await _body(request)
    reasons = await _call(
        _registry(request).check_compatibility,
        subject,
        version,
        doc.get("schema"),
        doc.get("schemaType"),
        doc.get("references"),
    )
    body: dict[str, Any] = {"is_compatible": not reasons}
    if _flag(request, "verbose"):
        body["messages"] = reasons
    return _json(body)


@router.post("/compatibility/subjects/{subject}/versions/{version}")
async def compatibility_version(subject: str, version: str, request: Request) -> Response:
    return await _compatibility(subject, version, request)


@router.post("/compatibility/subjects/{subject}/versions")
async def compatibility_all(subject: str, request: Request) -> Response:
    return await _compatibility(subject, None, request)


# ------------------------------------------------------------------ config and mode


@router.get("/config")
async def get_global_config(request: Request) -> Response:
    return _json({"compatibilityLevel": await _call(_registry(request).get_config, None)})


@router.get("/config/{subject}")
async def get_subject_config(subject: str, request: Request) -> Response:
    level = await _call(_registry(request).get_config, subject, _flag(request, "defaultToGlobal"))
    return _json({"compatibilityLevel": level})


async def _put_config(subject: str | None, request: Request) -> Response:
    doc = await _body(request)
    level = await _call(_registry(request).set_config, subject, doc.get("compatibility"))
    return _json({"compatibility": level})


@router.put("/config")
async def put_global_config(request: Request) -> Response:
    return await _put_config(None, request)


@router.put("/config/{subject}")
async def put_subject_config(subject: str, request: Request) -> Response:
    return await _put_config(subject, request)


@router.delete("/config")
async def delete_global_config(request: Request) -> Response:
    return _json({"compatibilityLevel": await _call(_registry(request).delete_config, None)})


@router.delete("/config/{subject}")
async def delete_subject_config(subject: str, request: Request) -> Response:
    return _json({"compatibilityLevel": await _call(_registry(request).delete_config, subject)})


@router.get("/mode")
async def get_global_mode(request: Request) -> Response:
    return _json({"mode": await _call(_registry(request).get_mode, None)})


@router.get("/mode/{subject}")
async def get_subject_mode(subject: str, request: Request) -> Response:
    return _json({"mode": await _call(_registry(request).get_mode, subject)})


async def _put_mode(subject: str | None, request: Request) -> Response:
    doc = await _body(request)
    return _json({"mode": await _call(_registry(request).set_mode, subject, doc.get("mode"))})


@router.put("/mode")
async def put_global_mode(request: Request) -> Response:
    return await _put_mode(None, request)


@router.put("/mode/{subject}")
async def put_subject_mode(subject: str, request: Request) -> Response:
    return await _put_mode(subject, request)


# ------------------------------------------------------------------ the app


def _install_errors(app: FastAPI) -> None:
    async def on_registry_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, e.TopiclakeError)
        if isinstance(exc, sr.SchemaRegistryError):
            code = exc.error_code
            status = code if code < 1000 else code // 100
        elif isinstance(exc, e.InvalidRequest):
            code, status = 400, 400
        elif exc.retriable or isinstance(exc, (e.StorageError, e.CommitConflict)):
            code, status = 50003, 503
        else:
            code, status = 50001, 500
        if status >= 500:
            logger.warning("schema registry %s %s: %s", request.method, request.url.path, exc.message)
        return _error(status, code, exc.message)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return _error(exc.status_code, exc.status_code, f"HTTP {exc.status_code} {exc.detail}")

    async def on_unknown(request: Request, exc: Exception) -> Response:
        logger.exception("schema registry %s %s failed", request.method, request.url.path)
        return _error(500, 50001, "Error in the backend data store")

    app.add_exception_handler(e.TopiclakeError, on_registry_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unknown)


_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error_code", "message"],
    "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
}


def _document_answers(app: FastAPI) -> None:
    """OpenAPI documents what the registry answers: its media type, and Confluent's error shape for every
    4xx/5xx (FastAPI's own 422 shape is never answered here)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            errors = {m: {"schema": _ERROR_SCHEMA} for m in (MEDIA_TYPE, "application/json")}
            for operations in schema.get("paths", {}).values():
                for op in operations.values():
                    responses = op.setdefault("responses", {})
                    for status, answer in responses.items():
                        content = answer.get("content", {})
                        if status.startswith("2") and "application/json" in content:
                            content.setdefault(MEDIA_TYPE, content["application/json"])
                    responses["422"] = {"description": "Unprocessable.", "content": errors}
                    responses.setdefault("4XX", {"description": "Refused.", "content": errors})
                    responses.setdefault("5XX", {"description": "Backend error.", "content": errors})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_registry_app(registry: SchemaRegistry) -> FastAPI:
    """The schema registry's FastAPI app over ``registry``."""
    app = FastAPI(
        title="topiclake schema registry",
        version=topiclake.__version__,
        description="Confluent Schema Registry's REST API over the warehouse's `_system/schemas` table.",
    )
    app.state.schema_registry = registry
    _install_errors(app)
    app.include_router(router)
    app.add_middleware(SlashedSubjects)
    _document_answers(app)
    return app
