"""Authentication and the route table's authorization for every HTTP request, as pure ASGI middleware.

Outermost in the stack (in front of cluster routing, the request counter and the fast produce path), so no
request reaches a route, another broker or the hot path unauthenticated. (With authentication off, the
gateway's front door serves common produce requests before this middleware: there is nothing to check.)
The principal comes from, in order: a valid inter-broker principal header (a fellow broker signed it, see
:mod:`topiclake.security.inter_broker`), ``Authorization: Basic`` (the REST Proxy's way: users of the
htpasswd file), ``Authorization: Bearer`` (a JWT), the TLS client certificate (``topiclake.tls_principal``
in the scope). No valid credentials: 401 with ``WWW-Authenticate``, the same message whatever was wrong.
Then the route's checks from :mod:`.route_acls`: 403 when one fails.

With auth off every request is ``User:ANONYMOUS`` and everything is allowed.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from topiclake.api.auth.access import HOST_KEY, PRINCIPAL_KEY, forbidden, security_of
from topiclake.api.auth.route_acls import OPEN_PATHS, needs_for
from topiclake.api.errors import confluent_body, is_native, native_body, status_for
from topiclake.errors import BrokerClosed, Forbidden, TopiclakeError, Unauthorized
from topiclake.security import ANONYMOUS, Principal, Security
from topiclake.security.inter_broker import CLIENT
from topiclake.security.inter_broker import HEADER as PRINCIPAL_HEADER

logger = logging.getLogger(__name__)

TLS_PRINCIPAL_KEY = "topiclake.tls_principal"
_MESSAGE = "authentication required: send valid credentials (HTTP Basic or a bearer token)"


class AuthMiddleware:
    """Pure ASGI middleware: authenticate, then check the route table.

    Args:
        app: The ASGI app behind.
        security: Where to find the :class:`Security` (default: ``app.state.security`` of the scope's app).
        route_checks: Apply the route table (False: authentication only, e.g. the schema registry).
        required: Answer 503 while ``security`` has none yet (a listener started beside the gateway with
            auth on must not be open before the gateway made its Security).
    """

    def __init__(
        self,
        app: ASGIApp,
        security: Callable[[], Security | None] | None = None,
        route_checks: bool = True,
        required: bool = False,
    ) -> None:
        self.app = app
        self._security = security
        self.route_checks = route_checks
        self.required = required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sec = self._security() if self._security is not None else security_of(scope.get("app"))
        host = (scope.get("client") or ("", 0))[0]
        if sec is None and self.required:
            await _deny(send, scope["path"], BrokerClosed("starting: retry"), [])
            return
        if sec is None or not sec.auth:
            scope[PRINCIPAL_KEY], scope[HOST_KEY] = ANONYMOUS, host
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if OPEN_PATHS.match(path):
            scope[PRINCIPAL_KEY], scope[HOST_KEY] = ANONYMOUS, host
            await self.app(scope, receive, send)
            return
        try:
            found = await self._authenticate(sec, scope, host)
        except Unauthorized:
            found = None
        if found is None:
            await _deny(send, path, Unauthorized(_MESSAGE), _challenges(sec))
            return
        principal, host = found
        scope[PRINCIPAL_KEY], scope[HOST_KEY] = principal, host
        if _cross_origin(scope):
            # a browser keeps Basic credentials: a page of another site must not post with them (CSRF)
            await _deny(send, path, Forbidden("cross-origin requests that change state are refused"), [])
            return
        if self.route_checks:
            needs, match = needs_for(scope["method"], path)
            for need in needs:
                assert match is not None
                name, op, kind = need.name(match), need.operation, need.resource_type
                if not sec.authorizer.authorize(principal, host, op, kind, name):
                    logger.info("denied %s on %s %s to %s", op.value, kind.value, name, principal)
                    await _deny(send, path, forbidden(principal, op, kind, name), [])
                    return
        token = CLIENT.set((principal, host))
        try:
            await self.app(scope, receive, send)
        finally:
            CLIENT.reset(token)

    async def _authenticate(self, sec: Security, scope: Scope, host: str) -> tuple[Principal, str] | None:
        authorization = None
        signed = None
        for k, v in scope["headers"]:
            if k == b"authorization":
                authorization = v.decode("latin-1")
            elif k == PRINCIPAL_HEADER.encode():
                signed = v.decode("latin-1")
        if signed is not None and sec.signer is not None:
            carried = sec.signer.verify(signed, scope["method"], scope["path"])
            if carried is not None:
                return carried
            logger.warning("ignored an inter-broker principal header that does not verify (from %s)", host)
        if authorization:
            scheme, _, credentials = authorization.partition(" ")
            scheme = scheme.lower()
            if scheme == "basic" and sec.users is not None:
                principal = await _basic(sec, credentials.strip())
                return None if principal is None else (principal, host)
            if scheme == "bearer" and sec.tokens is not None:
                return sec.tokens.verify(credentials.strip()), host
            return None
        tls = scope.get(TLS_PRINCIPAL_KEY)
        if isinstance(tls, str):  # "User:CN=..." as text
            tls = Principal.parse(tls) if ":" in tls else Principal("User", tls)
        if isinstance(tls, Principal):
            return tls, host
        return None


_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def _cross_origin(scope: Scope) -> bool:
    """An unsafe method whose ``Origin`` (sent by browsers) is not this server's host."""
    if scope["method"] in _SAFE:
        return False
    origin: str | None = None
    host: str | None = None
    for k, v in scope["headers"]:
        if k == b"origin":
            origin = v.decode("latin-1")
        elif k == b"host":
            host = v.decode("latin-1")
    if origin is None:
        return False  # not a browser, or a same-origin request of an old one
    return origin == "null" or urlsplit(origin).netloc != host


async def _basic(sec: Security, credentials: str) -> Principal | None:
    try:
        name, sep, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not sep or not name:
        return None
    if sec.users is not None and sec.users.verified_before(name, password):
        return Principal("User", name)  # no bcrypt, no thread hop: the common case of a known client
    return await anyio.to_thread.run_sync(sec.check_password, name, password)


def _challenges(sec: Security) -> list[str]:
    out = ['Basic realm="topiclake"']
    if sec.tokens is not None:
        out.append('Bearer realm="topiclake"')
    return out


async def _deny(send: Send, path: str, exc: TopiclakeError, challenges: list[str]) -> None:
    status, _ = status_for(exc, path)
    body: dict[str, Any] = native_body(exc) if is_native(path) else confluent_body(exc, path)
    payload = orjson.dumps(body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *((b"www-authenticate", c.encode()) for c in challenges),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
