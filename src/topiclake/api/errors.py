"""The one place that maps errors to HTTP: status codes and bodies for both API families.

Native routes (``/v1``, health, metrics) answer ``{"error": {"code", "message", "retriable", "details"}}``.
Kafka REST Proxy routes (everything else) answer Confluent's ``{"error_code", "message"}``. Unknown
exceptions are logged with their traceback and answered 500 without internals.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from topiclake import errors as e
from topiclake.schema_registry import errors as sr

logger = logging.getLogger(__name__)

#: error class -> (HTTP status, Confluent error_code). The first matching class in MRO order wins.
ERROR_TABLE: dict[type[e.TopiclakeError], tuple[int, int]] = {
    e.TopicNotFound: (404, 40401),
    e.PartitionNotFound: (404, 40402),
    e.TopicExists: (400, 40002),
    e.InvalidTopicName: (400, 40002),
    e.InvalidConfig: (400, 40002),
    e.InvalidPartitions: (400, 40002),
    e.RecordTooLarge: (413, 41301),
    e.InvalidRecord: (422, 42206),
    e.InvalidRequest: (400, 40002),
    e.OffsetOutOfRange: (416, 40002),
    e.OutOfOrderSequence: (409, 40903),
    e.InvalidProducerEpoch: (409, 40903),
    e.NotLeader: (421, 50003),
    e.Throttled: (429, 42901),
    e.RequestTimedOut: (408, 40801),
    e.CommitConflict: (503, 50003),
    e.StorageError: (503, 50003),
    e.BrokerClosed: (503, 50003),
    e.Unauthorized: (401, 40101),
    e.Forbidden: (403, 40301),
    e.GroupNotFound: (404, 40403),
    e.UnknownMemberId: (404, 40403),
    e.ConsumerInstanceNotFound: (404, 40403),
    e.IllegalGeneration: (409, 40903),
    e.RebalanceInProgress: (409, 40903),
    e.GroupNotEmpty: (409, 40903),
    e.InconsistentGroupProtocol: (409, 40903),
    # the schema registry's own errors, when a REST Proxy produce names or sends a schema
    sr.SchemaRegistryError: (500, 50001),
    sr.SchemaNotFound: (404, 40403),
    sr.SubjectNotFound: (404, 40401),
    sr.InvalidSchema: (422, 42201),
    sr.IncompatibleSchema: (409, 409),
    sr.OperationNotPermitted: (422, 42205),
    e.SchemaMissing: (422, 42202),
}

#: REST Proxy v3 admin routes answer an unknown topic or partition with 40403 ("This server does not host
#: this topic-partition"), where v2 answers 40401/40402.
V3_OVERRIDES: dict[type[e.TopiclakeError], tuple[int, int]] = {
    e.TopicNotFound: (404, 40403),
    e.PartitionNotFound: (404, 40403),
}

_NATIVE_PREFIXES = ("/v1/", "/healthz", "/readyz", "/metrics")


class HTTPError(e.TopiclakeError):
    """An error decided at the HTTP edge (wrong content type, unacceptable Accept, bad body...).

    Args:
        status: HTTP status.
        error_code: Confluent error code for REST Proxy routes.
        message: What went wrong and what to do.
        code: Native error code.
    """

    def __init__(self, status: int, error_code: int, message: str, code: str = "bad_request") -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.code = code


def status_for(exc: e.TopiclakeError, path: str = "") -> tuple[int, int]:
    """HTTP status and Confluent error code for an error (``path`` picks the v3 variants)."""
    if isinstance(exc, HTTPError):
        return exc.status, exc.error_code
    table = (
        {**ERROR_TABLE, **V3_OVERRIDES}
        if path.startswith("/v3/") and not _is_v3_produce(path)
        else ERROR_TABLE
    )
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return 500, 50002


def _is_v3_produce(path: str) -> bool:
    # v3 produce answers a missing topic with 40401 before its stream opens (Confluent's "topic not present")
    return path.endswith(("/records", "/records:batch"))


def is_native(path: str) -> bool:
    """Whether a path belongs to the native API (its error shape differs from the REST Proxy's)."""
    return path.startswith(_NATIVE_PREFIXES)


def confluent_body(exc: e.TopiclakeError, path: str = "") -> dict[str, Any]:
    """Confluent's error body for an error."""
    return {"error_code": status_for(exc, path)[1], "message": exc.message}


def native_body(exc: e.TopiclakeError) -> dict[str, Any]:
    """The native error body for an error."""
    return {"error": exc.to_dict()}


def error_response(request: Request, exc: e.TopiclakeError) -> Response:
    """Render an error in the shape of the API family the request belongs to."""
    path = request.url.path
    status, _ = status_for(exc, path)
    body = native_body(exc) if is_native(path) else confluent_body(exc, path)
    headers = {}
    if isinstance(exc, e.Throttled):
        headers["Retry-After"] = str(max(1, -(-exc.retry_after_ms // 1000)))
    elif status == 503:
        headers["Retry-After"] = "1"
    media = "application/json" if is_native(request.url.path) else _confluent_media(request)
    return Response(encode(body), status_code=status, headers=headers, media_type=media)


def encode(body: Any) -> bytes:
    """An error body as JSON bytes, whatever input it echoes (see :func:`topiclake.errors.json_safe`)."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError: a 65-bit integer, a NaN key...
        return orjson.dumps(e.json_safe(body))


def _confluent_media(request: Request) -> str:
    accept = request.headers.get("accept", "")
    if "application/vnd.kafka.v2+json" in accept or request.url.path.startswith(("/topics", "/consumers")):
        return "application/vnd.kafka.v2+json"
    return "application/json"


def install(app: FastAPI) -> None:
    """Register the exception handlers on an app."""

    @app.exception_handler(e.TopiclakeError)
    async def _topiclake(request: Request, exc: e.TopiclakeError) -> Response:
        if status_for(exc)[0] >= 500:
            logger.warning("%s %s failed: %s", request.method, request.url.path, exc.message)
        return error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        problems = [{"loc": list(err.get("loc", ())), "msg": err.get("msg", "")} for err in exc.errors()]
        where = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems[:5])
        err = HTTPError(422, 42206, f"invalid request: {where}", code="invalid_request")
        err.details = {"errors": problems}
        return error_response(request, err)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = exc.status_code  # Confluent answers unknown routes and methods with the HTTP status as code
        message = str(exc.detail) if exc.detail else "HTTP error"
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}: see /docs for the API"
        return error_response(request, HTTPError(exc.status_code, code, message, code="http_error"))

    @app.exception_handler(Exception)
    async def _unknown(request: Request, exc: Exception) -> Response:
        logger.exception("unexpected error in %s %s", request.method, request.url.path)
        err = HTTPError(500, 50002, "internal server error; the server log has the details", code="internal")
        return error_response(request, err)
