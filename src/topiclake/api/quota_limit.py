"""HTTP enforcement of the client quotas (topiclake.security.quotas): a pure ASGI middleware.

It sits inside the authentication middleware (which puts the principal in the scope) and outside the fast
produce path, so every route and :class:`~topiclake.api.fast_produce.FastProduce` are covered (its front
door, in front of all middleware, serves only while no quota is configured). A principal
in debt on a kind the request would use (requests, produce bytes, fetch bytes) is answered 429 with
``Retry-After`` before a byte of its body is read: nothing of a refused request was accepted, and nothing
accepted is dropped. Otherwise the request is counted, its produce body bytes as they are read and its
fetch (records) answer bytes as they are sent, and it proceeds; the debt it leaves throttles the next one.
Health, readiness and metrics probes are never throttled.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topiclake.api.errors import confluent_body, encode, is_native, native_body
from topiclake.errors import Throttled
from topiclake.security import ANONYMOUS
from topiclake.security.quotas import QuotaKind, Quotas

_PRODUCE = re.compile(
    r"^(/v1/topics/[^/]+/records|/topics/[^/]+(/partitions/[^/]+)?|/v3/clusters/[^/]+/topics/[^/]+/records(:batch)?)$"
)
_FETCH = re.compile(r"^(/v1/topics/[^/]+/partitions/[^/]+/records|/consumers/[^/]+/instances/[^/]+/records)$")
_EXEMPT = ("/healthz", "/readyz", "/metrics")


def quota_key(scope: Scope) -> tuple[str, str]:
    """The principal whose quotas a request uses, and the client that splits ``User:ANONYMOUS``."""
    principal = scope.get("topiclake.principal") or ANONYMOUS
    client = scope.get("client")
    host = client[0] if principal == ANONYMOUS and client else ""
    return str(principal), host


def kind_of(method: str, path: str) -> QuotaKind | None:
    """The byte quota a request uses, if any."""
    if method == "POST" and _PRODUCE.match(path):
        return QuotaKind.PRODUCE
    if method == "GET" and _FETCH.match(path):
        return QuotaKind.FETCH
    return None


class QuotaLimit:
    """Pure ASGI middleware; see the module docs."""

    def __init__(self, app: ASGIApp, quotas: Quotas) -> None:
        self.app = app
        self.quotas = quotas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.quotas.enabled or scope["path"].startswith(_EXEMPT):
            await self.app(scope, receive, send)
            return
        principal, client = quota_key(scope)
        kind = kind_of(scope["method"], scope["path"])
        kinds = (QuotaKind.REQUEST, kind) if kind is not None else (QuotaKind.REQUEST,)
        wait_ms = self.quotas.worst_throttle_ms(principal, kinds, client)
        if wait_ms > 0:
            await _throttled(scope, send, principal, wait_ms)
            return
        self.quotas.record(principal, QuotaKind.REQUEST, 1, client)
        if kind is QuotaKind.PRODUCE:
            receive = self._counting_receive(receive, principal, client)
        elif kind is QuotaKind.FETCH:
            send = self._counting_send(send, principal, client)
        await self.app(scope, receive, send)

    def _counting_receive(self, receive: Receive, principal: str, client: str) -> Receive:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.quotas.record(principal, QuotaKind.PRODUCE, len(message.get("body", b"")), client)
            return message

        return counted

    def _counting_send(self, send: Send, principal: str, client: str) -> Send:
        async def counted(message: Message) -> None:
            if message["type"] == "http.response.body":
                self.quotas.record(principal, QuotaKind.FETCH, len(message.get("body", b"")), client)
            await send(message)

        return counted


async def _throttled(scope: Scope, send: Send, principal: str, wait_ms: int) -> None:
    path = scope["path"]
    exc = Throttled(
        f"{principal} is over its quota; retry after {wait_ms} ms",
        retry_after_ms=wait_ms,
        principal=principal,
    )
    body = encode(native_body(exc) if is_native(path) else confluent_body(exc, path))
    media = (
        b"application/json"
        if is_native(path) or path.startswith("/v3/")
        else b"application/vnd.kafka.v2+json"
    )
    headers = [
        (b"content-type", media),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(max(1, -(-wait_ms // 1000))).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
