"""The asyncio Kafka listener: framing, in-order answers per connection, dispatch to handlers.

A connection reads 4-byte-size-prefixed frames; each request is handled in its own task (clients pipeline
up to 5), and a writer task sends the answers strictly in request order. A frame that is oversized,
truncated, or of an API key and version kio cannot parse closes that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from topiclake.errors import TopiclakeError
from topiclake.kafka import codec, quota
from topiclake.kafka import errors as kerr
from topiclake.kafka.classic_groups import ClassicGroups
from topiclake.kafka.context import ConnectionState, Context
from topiclake.kafka.handlers import HANDLERS, api_versions_fallback, error_response
from topiclake.kafka.versions import API_VERSIONS, supported
from topiclake.platform import Broker
from topiclake.platform.cluster import Endpoint
from topiclake.security.quotas import Quotas

logger = logging.getLogger(__name__)

_CLOSE: Final = object()
_PIPELINE: Final = 32


class KafkaListenerError(TopiclakeError):
    """The Kafka listener cannot start (e.g. its port is taken)."""

    code = "kafka_listener_error"


class KafkaListener:
    """A Kafka protocol listener serving one broker.

    Args:
        broker: The broker (shared with HTTP).
        host: Address to bind (127.0.0.1 by default).
        port: Port to bind (> 0).
        advertised_host: Host clients are told to use (default ``host``; this machine's name when
            ``host`` is a wildcard address).
        advertised_port: Port clients are told to use (default ``port``).
        max_request_bytes: Largest request frame (Kafka's ``socket.request.max.bytes``).
        quotas: Client quotas per principal (shared with HTTP; kafka/quota.py), none by default.
    """

    def __init__(
        self,
        broker: Broker,
        host: str = "127.0.0.1",
        port: int = 9092,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        max_request_bytes: int = 100 * 1024 * 1024,
        quotas: Quotas | None = None,
    ) -> None:
        self.broker = broker
        self.quotas = quotas
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        if advertised_host is None and host in ("0.0.0.0", "::", ""):
            advertised_host = socket.getfqdn()  # a wildcard bind is no address a client can use
        self.context = Context(
            broker,
            advertised_host or host,
            advertised_port or port,
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="kafka"),
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="kafka-poll"),
        )
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.groups = ClassicGroups()
        self.context.state["classic_groups"] = self.groups

    async def start(self) -> None:
        """Bind the port and register the listener with the broker.

        Raises:
            KafkaListenerError: The port is in use or cannot be bound.
        """
        try:
            self._server = await asyncio.start_server(self._connection, self.host, self.port)
        except OSError as exc:
            why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc})"
            raise KafkaListenerError(
                f"Kafka port {self.host}:{self.port} {why}: pick another with --kafka-port "
                "(or TOPICLAKE_KAFKA_PORT), or 0 to turn the Kafka listener off",
                host=self.host,
                port=self.port,
            ) from exc
        self.groups.start()
        self.broker.groups.foreign_groups = self.groups.active
        self.broker.advertise(Endpoint("kafka", self.context.host, self.context.port))
        logger.info(
            "kafka listener of broker %d on %s:%d (advertised %s:%d)",
            self.broker.config.broker_id,
            self.host,
            self.port,
            self.context.host,
            self.context.port,
        )

    async def close(self) -> None:
        """Stop accepting, close open connections, release the threads."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        await self.groups.close()
        self.broker.groups.foreign_groups = None
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self.context.executor.shutdown(wait=False, cancel_futures=True)
        self.context.poll_executor.shutdown(wait=False, cancel_futures=True)
        logger.info("kafka listener of broker %d closed", self.broker.config.broker_id)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        pending: asyncio.Queue[asyncio.Task[object] | None] = asyncio.Queue(maxsize=_PIPELINE)
        state = ConnectionState()
        responder = asyncio.create_task(self._respond(pending, writer, peer))
        try:
            while not responder.done():
                head = await reader.readexactly(4)
                size = int.from_bytes(head, "big", signed=True)
                if size < 8 or size > self.max_request_bytes:
                    logger.warning("kafka %s: frame of %d bytes refused; closing", peer, size)
                    break
                frame = await reader.readexactly(size)
                await pending.put(asyncio.create_task(self._dispatch(frame, peer, state)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            responder.cancel()
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                pending.put_nowait(None)
            if not responder.done():
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(responder), 30)
            responder.cancel()
            writer.close()
            self._connections.discard(task)

    async def _respond(
        self, pending: asyncio.Queue[asyncio.Task[object] | None], writer: asyncio.StreamWriter, peer: object
    ) -> None:
        while True:
            task = await pending.get()
            if task is None:
                return
            out = await task
            if out is _CLOSE:
                writer.transport.abort()
                return
            if isinstance(out, bytes):
                try:
                    writer.write(out)
                    await writer.drain()
                except ConnectionError:
                    logger.info("kafka %s: client went away", peer)
                    return

    async def _dispatch(self, frame: bytes, peer: object, state: ConnectionState) -> object:
        try:
            api_key, version, correlation_id = codec.peek_header(frame)
        except codec.FrameError:
            return _CLOSE
        if api_key == API_VERSIONS and not supported(api_key, version):
            return codec.encode_response(API_VERSIONS, 0, correlation_id, api_versions_fallback())
        handler = HANDLERS.get(api_key)
        if handler is None or not supported(api_key, version):
            logger.info("kafka %s: api key %d v%d is not supported", peer, api_key, version)
            if codec.has_schema(api_key, version):
                return codec.encode_response(
                    api_key, version, correlation_id, error_response(kerr.UNSUPPORTED_VERSION)
                )
            return _CLOSE
        try:
            request = dataclasses.replace(codec.parse_request(frame), connection=state)
        except codec.FrameError as exc:
            logger.warning("kafka %s: %s; closing", peer, exc)
            return _CLOSE
        try:
            data = await handler(self.context, request)
        except Exception as exc:
            code = kerr.code_for(exc)
            logger.warning("kafka %s: api key %d v%d failed: %s", peer, api_key, version, exc)
            data = error_response(code)
        if data is None:
            return None
        try:
            out = codec.encode_response(api_key, version, correlation_id, data)
            if self.quotas is not None and self.quotas.enabled:
                out = await quota.throttled(self.quotas, state, peer, frame, data, out)
            return out
        except Exception:
            logger.exception("kafka %s: cannot encode api key %d v%d answer; closing", peer, api_key, version)
            return _CLOSE
