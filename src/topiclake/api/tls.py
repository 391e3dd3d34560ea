"""TLS on the HTTP listener: uvicorn's options from the settings, and the client certificate's principal.

uvicorn puts nothing of the TLS connection into the ASGI scope, and a pure ASGI middleware never sees the
transport. So the HTTP protocol class uvicorn would pick anyway is subclassed: when a connection is made
(after the TLS handshake) it reads the verified peer certificate once and wraps the connection's app so
that every request on it carries ``scope["topiclake.tls_principal"]`` (a
:class:`~topiclake.security.principal.Principal`; absent without a client certificate).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from topiclake.security.tls import PrincipalMapper, client_context, peer_principal, server_context
from topiclake.settings import GatewaySettings

#: The ASGI scope key of the verified client certificate's principal.
TLS_PRINCIPAL = "topiclake.tls_principal"


class TlsPrincipalProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol (httptools, else h11) that hands the client certificate's principal on."""

    #: How a certificate's DN becomes a principal (a subclass per gateway sets its rules).
    mapper: PrincipalMapper = PrincipalMapper()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        principal = peer_principal(transport.get_extra_info("ssl_object"), self.mapper)
        if principal is None:
            return
        inner: Any = self.app  # type: ignore[has-type]

        async def app(scope: Any, receive: Any, send: Any) -> None:
            scope[TLS_PRINCIPAL] = principal
            await inner(scope, receive, send)

        self.app = app


def uvicorn_tls_options(settings: GatewaySettings) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.Config`` for the settings' TLS (empty when TLS is off)."""
    if not settings.tls_cert:
        return {}
    options: dict[str, Any] = {
        "ssl_certfile": settings.tls_cert,
        "ssl_keyfile": settings.tls_key,
        "http": type("TlsPrincipalProtocol", (TlsPrincipalProtocol,), {"mapper": principal_mapper(settings)}),
    }
    if settings.tls_ca:
        options["ssl_ca_certs"] = settings.tls_ca
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


def principal_mapper(settings: GatewaySettings) -> PrincipalMapper:
    """The settings' TLS principal mapping rules."""
    return PrincipalMapper(settings.tls_principal_mapping_rules)


def scheme(settings: GatewaySettings) -> str:
    """``https`` when the gateway speaks TLS, else ``http``."""
    return "https" if settings.tls_cert else "http"


def broker_client_context(settings: GatewaySettings) -> ssl.SSLContext | None:
    """How this broker reaches the others over HTTPS (None without TLS): it verifies them with ``tls_ca``
    (else the system's trust store) and, under mTLS, presents its own certificate."""
    if not settings.tls_cert:
        return None
    if settings.tls_ca:
        return client_context(settings.tls_ca, settings.tls_cert, settings.tls_key)
    return client_context()


def listener_context(settings: GatewaySettings) -> ssl.SSLContext | None:
    """The server context of the Kafka listener (None without TLS); ``tls_ca`` makes it mTLS."""
    if not settings.tls_cert or not settings.tls_key:
        return None
    return server_context(settings.tls_cert, settings.tls_key, settings.tls_ca)
