"""The native produce route's common case, served below FastAPI's routing: the HTTP hot path.

``POST /v1/topics/{topic}/records`` with a JSON body, for a topic this broker has open and leads, is by far
the most frequent request, and FastAPI's routing, dependency solving and validation cost more than the
work itself for a small batch. :class:`FastProduce` (pure ASGI) parses it, queues the records with
:func:`topiclake.platform.produce_rows.start` and awaits the commit on the event loop. Anything else —
another content type, a query it cannot read, a body that does not parse, a topic not open yet, a
partition another broker leads, an error before anything was queued — falls through, body replayed, to
the documented FastAPI route, which answers exactly as it always did. OpenAPI documents that route.
"""

from __future__ import annotations

import functools
import re
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, unquote

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topiclake.api import codec
from topiclake.api.errors import native_body, status_for
from topiclake.api.produce_body import producer_from_json, result_bodies, rows_from_json
from topiclake.errors import TopiclakeError
from topiclake.platform import produce_rows
from topiclake.platform.records import normalize_acks

_PATH = re.compile(r"^/v1/topics/([^/]+)/records$")
_ROUTE = SimpleNamespace(path="/v1/topics/{topic}/records")  # what the request counter reports
_JSON_HEADERS = [(b"content-type", b"application/json")]


@functools.lru_cache(maxsize=256)  # producers send the same few query strings again and again
def _query(raw: bytes) -> tuple[str, int | None, str] | None:
    """acks, partition and encoding, or None when FastAPI should judge the query."""
    acks, partition, encoding = "all", None, "json"
    for k, v in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if k == "acks":
            acks = v
        elif k == "partition":
            if not v.lstrip("-").isdigit():
                return None
            partition = int(v)
        elif k == "encoding":
            encoding = v
    if encoding not in codec.ENCODINGS:
        return None
    return acks, partition, encoding


class FastProduce:
    """Pure ASGI middleware in front of the routes; see the module docs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        m = _PATH.match(scope["path"])
        query = _query(scope.get("query_string", b"")) if m else None
        if m is None or query is None or not _json(scope):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state = scope["app"].state
        body, complete = await _read(receive, state.settings.max_request_bytes)
        if complete and await self._serve(scope, send, state, unquote(m.group(1)), query, body, started):
            return
        await self.app(scope, _replay(body, complete, receive), send)

    async def _serve(
        self,
        scope: Scope,
        send: Send,
        state: Any,
        topic: str,
        query: tuple[str, int | None, str],
        body: bytes,
        started: float,
    ) -> bool:
        acks, partition, encoding = query
        try:
            doc = orjson.loads(body)
            ack = normalize_acks(acks)
            records = doc["records"]
            if not isinstance(records, list) or not records:
                return False
            if doc.get("key_schema_id") is not None or doc.get("value_schema_id") is not None:
                return False  # framed with registered schemas: the documented route
            producer = producer_from_json(doc.get("producer"))
            rows, explicit, errors = rows_from_json(records, encoding)
            if errors and producer is not None:
                return False
            pending = produce_rows.start(
                state.broker, topic, rows, explicit, partition=partition, acks=ack, producer=producer
            )
        except (orjson.JSONDecodeError, TopiclakeError, TypeError, KeyError, AttributeError):
            return False  # nothing was queued: the documented route answers (and errs) as it always did
        if pending is None:
            return False
        scope["route"] = _ROUTE
        try:
            await pending.committed()
        except TopiclakeError as exc:
            status, _ = status_for(exc, scope["path"])
            await _respond(send, status, orjson.dumps(native_body(exc)))
            return True
        results = result_bodies(pending.finish(), errors, len(records))
        nbytes = sum(map(len, filter(None, rows.keys))) + sum(map(len, filter(None, rows.values)))
        state.metrics.produced(topic, len(results), nbytes, "native", ack, started)
        await _respond(send, 200, orjson.dumps({"topic": topic, "results": results}))
        return True


def _json(scope: Scope) -> bool:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return bool(v.split(b";", 1)[0].strip().lower() == b"application/json")
    return False


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The body, and whether it was read whole within ``limit`` (else the route answers 413)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            return b"".join(chunks), False
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _respond(send: Send, status: int, payload: bytes) -> None:
    headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
