"""The native produce route's common case, served below FastAPI's routing: the HTTP hot path.

``POST /v1/topics/{topic}/records`` with a JSON body, for a topic this broker has open and leads, is by far
the most frequent request, and FastAPI's routing, dependency solving and validation cost more than the
work itself for a small batch. :class:`FastProduce` (pure ASGI) parses it, queues the records with
:func:`topiclake.platform.produce_rows.start` and awaits the commit on the event loop. An Arrow IPC body
(``?partition=N``) is screened and queued the same way (:meth:`~topiclake.platform.Broker.start_arrow`)
instead of blocking a worker thread until its commit. Anything else — another content type, a query it
cannot read, a body that does not parse, a topic not open yet, a partition another broker leads, an error
before anything was queued — falls through, body replayed, to the documented FastAPI route, which answers
exactly as it always did. OpenAPI documents that route.

The gateway runs one instance in front of all its middleware (:func:`front_door`) and one inside it, after
authentication; see docs/decisions.md, "a front door".
"""

from __future__ import annotations

import functools
import re
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, unquote

import orjson
import pyarrow as pa
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topiclake.api import codec
from topiclake.api.errors import native_body, status_for
from topiclake.api.forwarding import GROUP_PROXY_HEADER
from topiclake.api.produce_body import answer_bodies, answer_json, producer_from_json, rows_from_json
from topiclake.errors import TopiclakeError
from topiclake.platform import produce_rows
from topiclake.platform.cluster.routing import FORWARDED_HEADER
from topiclake.platform.records import normalize_acks

_PATH = re.compile(r"^/v1/topics/([^/]+)/records$")
_ROUTE = SimpleNamespace(path="/v1/topics/{topic}/records")  # what the request counter reports
_JSON_HEADERS = [(b"content-type", b"application/json")]
_JSON, _ARROW = b"application/json", b"application/vnd.apache.arrow.stream"
_SERVED = frozenset((_JSON, _ARROW))
_TRIED = "topiclake.fast_produce"  # scope key: the request was tried once (front door or inner)
_ROUTED = frozenset((FORWARDED_HEADER.encode(), GROUP_PROXY_HEADER.encode()))


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
    """Pure ASGI middleware in front of the routes; see the module docs.

    Args:
        app: The ASGI app behind.
        front: The gateway app, when this instance sits in front of all its middleware (see
            :func:`front_door`); it then serves only while nothing that middleware does applies to the
            request (authentication off, no quotas, not a forwarded request) and counts what it answers.
    """

    def __init__(self, app: ASGIApp, front: Any = None) -> None:
        self.app = app
        self.front = front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _TRIED in scope:
            await self.app(scope, receive, send)
            return
        m = _PATH.match(scope["path"])
        query = _query(scope.get("query_string", b"")) if m else None
        media = _media(scope, self.front is not None) if m is not None and query is not None else None
        if m is None or query is None or media is None:
            await self.app(scope, receive, send)
            return
        if self.front is None:
            state = scope["app"].state
        else:
            state = self.front.state
            if not _open(state):
                await self.app(scope, receive, send)  # the middleware has work to do: the inner instance
                return
            scope["app"] = self.front
        scope[_TRIED] = True  # one attempt per request: the inner instance lets a fall-through pass
        started = time.perf_counter()
        body, complete = await _read(receive, state.settings.max_request_bytes)
        topic = unquote(m.group(1))
        status = 0
        if complete and media == _JSON:
            status = await self._serve(scope, send, state, topic, query, body, started)
        elif complete:
            acks, partition, _ = query
            status = await _serve_arrow(scope, send, state, topic, acks, partition, body, started)
        if not status:
            await self.app(scope, _replay(body, complete, receive), send)
        elif self.front is not None:  # the request counter is behind us
            state.metrics.request("POST", _ROUTE.path, status)

    async def _serve(
        self,
        scope: Scope,
        send: Send,
        state: Any,
        topic: str,
        query: tuple[str, int | None, str],
        body: bytes,
        started: float,
    ) -> int:
        """The answer's status, or 0 when nothing was queued and the documented route must answer."""
        acks, partition, encoding = query
        try:
            doc = orjson.loads(body)
            ack = normalize_acks(acks)
            records = doc["records"]
            if not isinstance(records, list) or not records:
                return 0
            if doc.get("key_schema_id") is not None or doc.get("value_schema_id") is not None:
                return 0  # framed with registered schemas: the documented route
            producer = producer_from_json(doc.get("producer"))
            rows, explicit, errors = rows_from_json(records, encoding)
            if errors and producer is not None:
                return 0
            pending = produce_rows.start(
                state.broker, topic, rows, explicit, partition=partition, acks=ack, producer=producer
            )
        except (orjson.JSONDecodeError, TopiclakeError, TypeError, KeyError, AttributeError):
            return 0  # nothing was queued: the documented route answers (and errs) as it always did
        if pending is None:
            return 0
        # the parsed body (a dict per record) is not kept while the commit is awaited: alive for a round
        # trip to the store, its 1,000 dicts outlived the young collections into the older generations
        n = len(records)
        nbytes = sum(map(len, filter(None, rows.keys))) + sum(map(len, filter(None, rows.values)))
        del doc, records, rows
        scope["route"] = _ROUTE
        try:
            await pending.committed()
        except TopiclakeError as exc:
            status, _ = status_for(exc, scope["path"])
            await _respond(send, status, orjson.dumps(native_body(exc)))
            return status
        payload = answer_json(topic, pending, errors, n)
        if payload is None:
            payload = orjson.dumps({"topic": topic, "results": answer_bodies(pending, errors, n)})
        state.metrics.produced(topic, n, nbytes, "native", ack, started)
        await _respond(send, 200, payload)
        return 200


async def _serve_arrow(
    scope: Scope,
    send: Send,
    state: Any,
    topic: str,
    acks: str,
    partition: int | None,
    body: bytes,
    started: float,
) -> int:
    """:meth:`FastProduce._serve` for an Arrow IPC body (``?partition=N``): the batch is screened and
    queued here, as the documented route does in a worker thread, and its commit awaited on the loop."""
    if partition is None:
        return 0  # the documented route says the Arrow path needs ?partition=N
    try:
        table = pa.ipc.open_stream(body).read_all()
        ack = normalize_acks(acks)
        handle = state.broker.start_arrow(topic, partition, table, acks=ack)
    except (pa.ArrowInvalid, OSError, TopiclakeError, KeyError, TypeError):
        return 0  # nothing was queued: the documented route answers (and errs) as it always did
    if handle is None:
        return 0
    scope["route"] = _ROUTE
    broker = state.broker
    try:
        if ack == "all":
            await produce_rows.committed((handle,), topic, broker.config.request_timeout_ms / 1000)
    except TopiclakeError as exc:
        status, _ = status_for(exc, scope["path"])
        await _respond(send, status, orjson.dumps(native_body(exc)))
        return status
    base = None if ack == "0" else broker.arrow_base(handle, None)
    nbytes = sum(table[c].nbytes for c in ("key", "value") if c in table.column_names)
    state.metrics.produced(topic, table.num_rows, nbytes, "native-arrow", ack, started)
    answer = {"topic": topic, "partition": partition, "base_offset": base, "count": table.num_rows}
    await _respond(send, 200, orjson.dumps(answer))
    return 200


def front_door(gateway: Any, app: ASGIApp) -> ASGIApp:
    """:class:`FastProduce` in front of ``app`` (the gateway's whole middleware stack, entered through
    ``gateway``'s own ``__call__``): with authentication off and no quotas, the common produce request is
    served before FastAPI's error, telemetry and body-limit layers and ours (auth, cluster routing,
    request counting, quotas), each of which would pass it through unchanged — about a fifth of a
    one-record request's CPU."""
    return FastProduce(app, front=gateway)


def _open(state: Any) -> bool:
    """Whether no middleware behind the front door has anything to do for a produce request."""
    security = getattr(state, "security", None)  # None until the lifespan made it
    quotas = getattr(state, "quotas", None)
    return bool(security is not None and not security.auth and quotas is not None and not quotas.enabled)


def _media(scope: Scope, front: bool) -> bytes | None:
    """The body's media type when this path serves it (JSON, Arrow IPC), else None; in front of the
    middleware, also None for a request another broker forwarded (cluster routing marks those)."""
    media: bytes | None = None
    for k, v in scope["headers"]:
        if k == b"content-type":
            media = bytes(v.split(b";", 1)[0].strip().lower())
            if media not in _SERVED:
                return None
            if not front:
                return media
        elif front and k in _ROUTED:
            return None
    return media


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
