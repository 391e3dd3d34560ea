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
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from topiclake.errors import TopiclakeError
from topiclake.kafka import codec, group_views, quota, sasl
from topiclake.kafka import errors as kerr
from topiclake.kafka.authz import failed_answer, guarded
from topiclake.kafka.classic_groups import ClassicGroups
from topiclake.kafka.consumer_groups import ConsumerGroups
from topiclake.kafka.context import ConnectionState, Context
from topiclake.kafka.handlers import HANDLERS, api_versions_fallback, error_response
from topiclake.kafka.handlers import transactions as transactions_handlers
from topiclake.kafka.read_ahead import READ_AHEAD, ReadAhead
from topiclake.kafka.versions import API_VERSIONS, BEFORE_AUTHENTICATION, supported
from topiclake.platform import Broker
from topiclake.platform.cluster import Endpoint
from topiclake.platform.groups.group_coordinator import GroupDescription
from topiclake.platform.transactions import TransactionCoordinator
from topiclake.security import ANONYMOUS, Security
from topiclake.security.inter_broker import CLIENT
from topiclake.security.quota_store import QuotaStore
from topiclake.security.quotas import Quotas
from topiclake.security.tls import PrincipalMapper, peer_principal

logger = logging.getLogger(__name__)

_CLOSE: Final = object()
_PIPELINE: Final = 32
#: How often open transactions are checked for their timeout (Kafka: every 10 s; the check is in memory).
_SWEEP_S: Final = 1.0
_COMPACT_EVERY_S: Final = 3600.0  # compaction of _system/transactions (old commits' records)


@dataclasses.dataclass(frozen=True)
class _Last:
    """An answer after which the connection is closed (a failed SASL exchange)."""

    data: bytes


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
        tls: A server SSL context: the listener speaks TLS (Kafka's SSL / SASL_SSL); one that requires
            client certificates makes the certificate's subject the connection's principal.
        security: Authentication and ACLs (default: open). With auth on, a connection must authenticate
            with SASL (or bring a TLS client certificate) before anything but ApiVersions and SASL.
        principal_mapper: How a client certificate's DN becomes its principal (default: the whole DN).
        sasl_mechanisms: Comma-separated SASL mechanisms to offer (:func:`topiclake.kafka.sasl.mechanisms`).
        quotas: Client quotas per principal (shared with HTTP; kafka/quota.py), none by default.
        quota_store: Where the quotas are kept (``_system/quotas``), for Describe/AlterClientQuotas.
    """

    def __init__(
        self,
        broker: Broker,
        host: str = "127.0.0.1",
        port: int = 9092,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        max_request_bytes: int = 100 * 1024 * 1024,
        *,
        tls: ssl.SSLContext | None = None,
        security: Security | None = None,
        sasl_mechanisms: str | None = None,
        principal_mapper: PrincipalMapper | None = None,
        quotas: Quotas | None = None,
        quota_store: QuotaStore | None = None,
    ) -> None:
        self.broker = broker
        self.quotas = quotas
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.tls = tls
        self.principal_mapper = principal_mapper or PrincipalMapper()
        if advertised_host is None and host in ("0.0.0.0", "::", ""):
            advertised_host = socket.getfqdn()  # a wildcard bind is no address a client can use
        self.context = Context(
            broker,
            advertised_host or host,
            advertised_port or port,
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="kafka"),
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="kafka-poll"),
        )
        self.context.security = security or Security.open()
        self.context.quota_store = quota_store
        self.context.sasl_mechanisms = sasl.mechanisms(
            self.context.security, tls is not None, sasl_mechanisms
        )
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.groups = ClassicGroups()
        self.context.state["classic_groups"] = self.groups
        self.transactions = TransactionCoordinator(broker)
        self.context.state["transactions"] = self.transactions
        self._sweeper: asyncio.Task[None] | None = None
        cfg = broker.config
        self.consumer_groups = ConsumerGroups(
            cfg.consumer_group_session_timeout_ms, cfg.consumer_group_heartbeat_interval_ms
        )
        self.context.state["consumer_groups"] = self.consumer_groups
        self.context.state[READ_AHEAD] = ReadAhead()

    async def start(self) -> None:
        """Bind the port and register the listener with the broker.

        Raises:
            KafkaListenerError: The port is in use or cannot be bound.
        """
        try:
            self._server = await asyncio.start_server(
                self._connection,
                self.host,
                self.port,
                ssl=self.tls,
                ssl_handshake_timeout=10 if self.tls else None,
            )
        except OSError as exc:
            why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc})"
            raise KafkaListenerError(
                f"Kafka port {self.host}:{self.port} {why}: pick another with --kafka-port "
                "(or TOPICLAKE_KAFKA_PORT), or 0 to turn the Kafka listener off",
                host=self.host,
                port=self.port,
            ) from exc
        self.groups.start()
        self._sweeper = asyncio.create_task(self._sweep_transactions())
        self.consumer_groups.start()
        self.broker.groups.foreign_groups = self._kafka_group_active
        self.broker.groups.kafka_groups = self._describe_groups
        self.broker.advertise(Endpoint("kafka", self.context.host, self.context.port))
        logger.info(
            "kafka listener of broker %d on %s:%d (advertised %s:%d, %s%s)",
            self.broker.config.broker_id,
            self.host,
            self.port,
            self.context.host,
            self.context.port,
            "SASL_" if self.context.security.auth else "",
            "SSL" if self.tls else "PLAINTEXT",
        )

    def _describe_groups(self, group_id: str | None) -> list[GroupDescription]:
        return group_views.describe(self.groups, self.consumer_groups, group_id)

    def _kafka_group_active(self, group_id: str) -> bool:
        return self.groups.active(group_id) or self.consumer_groups.active(group_id)

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
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(BaseException):
                await self._sweeper
        await asyncio.get_running_loop().run_in_executor(None, self.transactions.close)
        await self.consumer_groups.close()
        self.broker.groups.foreign_groups = None
        self.broker.groups.kafka_groups = None
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self.context.state[READ_AHEAD].close()
        self.context.executor.shutdown(wait=False, cancel_futures=True)
        self.context.poll_executor.shutdown(wait=False, cancel_futures=True)
        logger.info("kafka listener of broker %d closed", self.broker.config.broker_id)

    def _abort_expired(self) -> None:
        self.transactions.abort_expired(transactions_handlers.owner_check(self.context))

    async def _sweep_transactions(self) -> None:
        """Roll forward decided commits (after a restart), then abort timed-out transactions every second;
        compact ``_system/transactions`` every hour."""
        compacted = time.monotonic()
        while True:
            try:
                await self.context.run(self._abort_expired)
                if time.monotonic() - compacted > _COMPACT_EVERY_S:
                    compacted = time.monotonic()
                    await self.context.run(self.transactions.compact)
            except Exception:  # logged; the next sweep tries again
                logger.exception("kafka: transaction sweep failed")
            await asyncio.sleep(_SWEEP_S)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        pending: asyncio.Queue[asyncio.Task[object] | None] = asyncio.Queue(maxsize=_PIPELINE)
        tls_principal = peer_principal(writer.get_extra_info("ssl_object"), self.principal_mapper)
        state = ConnectionState(
            tls_principal=tls_principal,
            host=str(peer[0]) if isinstance(peer, tuple) and peer else "",
            principal=tls_principal or ANONYMOUS,
            authenticated=not self.context.security.auth or tls_principal is not None,
        )
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
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
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
            last = isinstance(out, _Last)
            if isinstance(out, _Last):
                out = out.data
            if isinstance(out, bytes):
                try:
                    writer.write(out)
                    await writer.drain()
                except ConnectionError:
                    logger.info("kafka %s: client went away", peer)
                    return
            if last:
                writer.close()
                return

    async def _dispatch(self, frame: bytes, peer: object, state: ConnectionState) -> object:
        # the client's principal travels (signed) with any work the broker forwards to another broker
        CLIENT.set((state.principal, state.host) if state.authenticated else None)
        try:
            return await self._answer(frame, peer, state)
        except Exception:  # a bug, not the client's: logged loudly, and only this connection ends
            logger.exception("kafka %s: unhandled error on a request; closing the connection", peer)
            return _CLOSE

    async def _answer(self, frame: bytes, peer: object, state: ConnectionState) -> object:
        try:
            api_key, version, correlation_id = codec.peek_header(frame)
        except codec.FrameError:
            return _CLOSE
        if api_key == API_VERSIONS and not supported(api_key, version):
            fallback = api_versions_fallback(self.context.broker.config.transaction_version)
            return codec.encode_response(API_VERSIONS, 0, correlation_id, fallback)
        if not state.authenticated and api_key not in BEFORE_AUTHENTICATION:
            logger.info("kafka %s: api key %d before authentication; closing", peer, api_key)
            return _CLOSE
        handler = HANDLERS.get(api_key)
        if handler is None or not supported(api_key, version, self.context.broker.config.transaction_version):
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
            data = await guarded(self.context, request, handler)
        except Exception as exc:
            code = kerr.code_for(exc)
            logger.warning("kafka %s: api key %d v%d failed: %s", peer, api_key, version, exc)
            data = failed_answer(request, code)
        if data is None:
            return None
        try:
            encoded = codec.encode_response(api_key, version, correlation_id, data)
            if self.quotas is not None and self.quotas.enabled:
                encoded = await quota.throttled(self.quotas, state, peer, frame, data, encoded)
            return _Last(encoded) if state.close_after_answer else encoded
        except Exception:
            logger.exception("kafka %s: cannot encode api key %d v%d answer; closing", peer, api_key, version)
            return _CLOSE
