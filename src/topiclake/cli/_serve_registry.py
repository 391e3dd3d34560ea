"""``topiclake serve`` with the schema registry: two uvicorn servers in one event loop.

The gateway's server owns the signal handlers; when it stops (Ctrl+C, SIGTERM) the registry's server is told
to stop too, so the process ends as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn

from topiclake.api import create_app
from topiclake.api.auth import AuthMiddleware
from topiclake.api.tls import scheme, uvicorn_tls_options
from topiclake.cli._graceful import GracefulServer
from topiclake.errors import InvalidConfig
from topiclake.platform import Storage
from topiclake.schema_registry import SchemaRegistry
from topiclake.schema_registry.http import create_registry_app
from topiclake.settings import GatewaySettings

logger = logging.getLogger(__name__)


class _QuietServer(uvicorn.Server):
    """A server that leaves signal handling to the other one."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _serve(gateway: uvicorn.Server, registry: uvicorn.Server, sock: socket.socket) -> None:
    registry_task = asyncio.create_task(registry.serve(sockets=[sock]))
    try:
        await gateway.serve()
    finally:
        registry.should_exit = True
        await registry_task


def serve_with_registry(settings: GatewaySettings) -> None:
    """Serve the gateway on ``settings.port`` and the schema registry on ``settings.schema_registry_port``."""
    # bind first: a busy port is a clear error before anything starts, not a traceback from a task
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.schema_registry_port))
    except OSError as exc:
        sock.close()
        raise InvalidConfig(
            f"cannot listen on {settings.host}:{settings.schema_registry_port} for the schema registry: "
            f"{exc.strerror or exc} (choose another --schema-registry-port, or 0 to turn it off)"
        ) from exc
    registry = SchemaRegistry(Storage(settings.warehouse, settings.storage_options))
    gateway_app = create_app(settings, schema_registry=registry)
    registry_app = create_registry_app(registry)
    # the registry asks for the same credentials as the gateway (authenticated is enough: docs/security.md)
    registry_app.add_middleware(
        AuthMiddleware,
        security=lambda: getattr(gateway_app.state, "security", None),
        route_checks=False,
        required=settings.auth,
    )
    logger.info(
        "schema registry on %s://%s:%d", scheme(settings), settings.host, settings.schema_registry_port
    )
    gateway = GracefulServer(  # a SIGTERM/Ctrl+C stop ends serve normally (exit 0), see _graceful
        uvicorn.Config(
            gateway_app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=settings.log_level == "debug",  # as serve.py: a line per request only at debug
            timeout_keep_alive=settings.keep_alive_s,
            **uvicorn_tls_options(settings),
        )
    )
    other = _QuietServer(
        uvicorn.Config(
            registry_app,
            host=settings.host,
            port=settings.schema_registry_port,
            log_level=settings.log_level,
            access_log=settings.log_level == "debug",  # as serve.py: a line per request only at debug
            timeout_keep_alive=settings.keep_alive_s,
            **uvicorn_tls_options(settings),
        )
    )
    try:
        asyncio.run(_serve(gateway, other, sock))
    finally:
        sock.close()
    error = getattr(gateway_app.state, "startup_error", None)
    if error is not None:  # e.g. BrokerIdInUse: exit 1 with its message, like every other command
        raise error
