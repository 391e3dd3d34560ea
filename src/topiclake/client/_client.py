""":class:`TopiclakeClient`: the native API of one gateway, or of a cluster found from bootstrap servers."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence

import httpx

from topiclake.client._groups import GroupsMixin
from topiclake.client._produce import ClusterProducer
from topiclake.client._records import RecordsMixin
from topiclake.client._wire import DEFAULT_URL
from topiclake.client.cluster import ClusterRouter, parse_bootstrap_servers
from topiclake.errors import InvalidRequest

#: Kafka's ``delivery.timeout.ms`` default: how long a produce call may retry.
DEFAULT_DELIVERY_TIMEOUT = 120.0


class TopiclakeClient(RecordsMixin, GroupsMixin):
    """Synchronous client of the native API of one gateway, or of a cluster of brokers.

    Args:
        url: Base URL of the gateway (ignored when ``bootstrap_servers`` is given).
        timeout: Seconds to wait for an answer (a long-poll fetch adds its ``wait_ms``).
        headers: Extra headers sent with every request (e.g. ``Authorization``).
        transport: An httpx transport (tests).
        bootstrap_servers: ``"host:port[,host:port...]"`` (or a list) of brokers of a cluster. The client
            reads the cluster's metadata from any of them that answers, sends each partition's records
            and fetches to its leader, and on a dead broker, a broken connection or ``not_leader`` reads
            the metadata again and retries with backoff.
        idempotent: Produce with the idempotent producer (per-partition producer ids and sequences, so a
            retry never writes a record twice). Default: on for ``acks=all`` when bootstrapping; it
            needs ``acks=all``.
        delivery_timeout: Seconds a produce call may take with its retries (Kafka's
            ``delivery.timeout.ms``) when bootstrapping.
        retry_backoff: First pause between retries, seconds (doubling up to ``retry_backoff_max``).
        retry_backoff_max: Longest pause between retries, seconds.
        verify: How to verify an ``https`` gateway (True, a CA bundle file, an ``ssl.SSLContext``, False).
        cert: A client certificate for mTLS (a PEM file, or a ``(cert_file, key_file)`` pair).

    The client is thread-safe (one httpx connection pool) and a context manager.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        timeout: float = 30.0,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        bootstrap_servers: str | Sequence[str] | None = None,
        idempotent: bool | None = None,
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        verify: ssl.SSLContext | str | bool = True,
        cert: str | tuple[str, str] | None = None,
    ) -> None:
        bootstrap = parse_bootstrap_servers(bootstrap_servers) if bootstrap_servers is not None else None
        super().__init__(
            bootstrap[0] if bootstrap else url,
            timeout,
            headers=headers,
            transport=transport,
            verify=verify,
            cert=cert,
        )
        self.idempotent = idempotent
        if bootstrap is not None:
            self._router = ClusterRouter(
                bootstrap, self._send, retry_backoff=retry_backoff, retry_backoff_max=retry_backoff_max
            )
            self._producer = ClusterProducer(
                self._router,
                self.init_producer,
                delivery_timeout=delivery_timeout,
                request_timeout=timeout,
            )

    @property
    def bootstrap_servers(self) -> list[str] | None:
        """Base URLs of the bootstrap servers, or None for a client of one gateway."""
        return None if self._router is None else list(self._router.bootstrap)

    def _idempotent_for(self, acks: str) -> bool:
        if self.idempotent is None:
            return acks in ("all", "-1")
        if self.idempotent and acks not in ("all", "-1"):
            raise InvalidRequest("the idempotent producer needs acks=all", acks=acks)
        return self.idempotent

    def close(self) -> None:
        """Stop the producer's threads and close the connection pool."""
        if self._producer is not None:
            self._producer.close()
        super().close()

    def __enter__(self) -> TopiclakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
