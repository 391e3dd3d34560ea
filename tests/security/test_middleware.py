"""The authentication middleware on its own: a TLS client certificate's principal (set in the ASGI scope
by the TLS layer) authenticates a request without an Authorization header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from topiclake.api.auth import AuthMiddleware
from topiclake.security import Authorizer, Principal, Security


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    body = str(scope["topiclake.principal"]).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _with_tls(principal: object) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if principal is not None:
            scope["topiclake.tls_principal"] = principal
        await inner(scope, receive, send)

    sec = Security(True, None, None, Authorizer(None, enabled=True))
    inner = AuthMiddleware(_echo, security=lambda: sec)
    return app


@pytest.mark.anyio
@pytest.mark.parametrize("given", [Principal("User", "CN=svc,O=acme"), "User:CN=svc,O=acme"])
async def test_tls_principal(tmp_path: Path, given: object) -> None:
    transport = httpx.ASGITransport(app=_with_tls(given))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get("/v1/metadata")
    assert r.status_code == 200 and r.text == "User:CN=svc,O=acme"


@pytest.mark.anyio
async def test_no_certificate_no_header_is_401() -> None:
    transport = httpx.ASGITransport(app=_with_tls(None))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get("/v1/metadata")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
