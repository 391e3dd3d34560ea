"""What every request shares: the constants of the wire, the gateway's errors rebuilt as their classes."""

from __future__ import annotations

import base64
import inspect
from typing import Any

import orjson

from topiclake import errors
from topiclake.errors import TopiclakeError

DEFAULT_URL = "http://127.0.0.1:8082"
NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"


class GatewayUnavailable(TopiclakeError):
    """The gateway could not be reached (connection refused, unknown host, connection reset).

    ``details["connected"]`` is False when no connection was made, so the request surely was not sent.
    """

    code = "gateway_unavailable"
    retriable = True


def _error_classes() -> dict[str, type[TopiclakeError]]:
    classes: dict[str, type[TopiclakeError]] = {}
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, TopiclakeError) and cls.__module__ == errors.__name__:
            classes[cls.code] = cls
    classes[GatewayUnavailable.code] = GatewayUnavailable
    return classes


_ERROR_CLASSES = _error_classes()


def error_from_body(status: int, body: bytes, retry_after: str | None = None) -> TopiclakeError:
    """Rebuild the error a gateway answered, as its :mod:`topiclake.errors` class.

    Args:
        status: HTTP status of the answer.
        body: The answer's body (the native error shape, or anything else from a proxy in between).
        retry_after: The Retry-After header, if any (seconds), used for :class:`~topiclake.errors.Throttled`.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        text = body.decode("utf-8", errors="replace").strip()[:200] or "(empty body)"
        exc = TopiclakeError(f"HTTP {status}: {text}", status=status)
        exc.retriable = status in (408, 421, 429, 502, 503, 504)
        return exc
    code: str = err["code"]
    message = str(err.get("message") or code)
    raw_details = err.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    cls = _ERROR_CLASSES.get(code, TopiclakeError)
    exc = cls.__new__(cls)
    TopiclakeError.__init__(exc, message, **details)
    if cls is TopiclakeError or cls.code != code:
        exc.code = code
    if isinstance(err.get("retriable"), bool):
        exc.retriable = err["retriable"]
    if isinstance(exc, errors.Throttled):
        retry_ms = details.get("retry_after_ms")
        if not isinstance(retry_ms, int):
            retry_ms = int(retry_after) * 1000 if retry_after and retry_after.isdigit() else 100
        exc.retry_after_ms = retry_ms
    return exc


def decode_bytes(data: str | None, encoding: str = "binary") -> bytes | None:
    """Bytes of a fetched key, value or header value from the fetch's ``encoding`` (default base64)."""
    if data is None:
        return None
    if encoding == "binary":
        return base64.b64decode(data)
    if encoding == "string":
        return data.encode()
    return orjson.dumps(data)
