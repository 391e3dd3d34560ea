"""What every handler gets: the broker, this listener's address and a thread pool for blocking calls."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topiclake.platform import Broker
from topiclake.security import ANONYMOUS, Principal, Security
from topiclake.security.quota_store import QuotaStore

T = TypeVar("T")


@dataclass
class ConnectionState:
    """State of one client connection.

    Attributes:
        produce_tail: Completes once the appends of the connection's latest Produce request have their
            offsets. The next Produce request appends only after it, so a client's pipelined batches of a
            partition keep their order (their sequence numbers) while their commits overlap.
        tls_principal: The principal of the connection's verified TLS client certificate (mTLS), if any.
        host: The client's IP address (the host of ACLs).
        principal: Who the connection is: the SASL user once authenticated, else the TLS principal,
            else ANONYMOUS.
        authenticated: Whether requests beyond ApiVersions and SASL may be served (always, auth off).
        sasl: The SASL exchange in progress or done on this connection (:mod:`topiclake.kafka.sasl`).
        close_after_answer: Set by a handler whose answer must be the connection's last (failed SASL).
    """

    produce_tail: asyncio.Future[None] | None = None
    tls_principal: Principal | None = None
    host: str = ""
    principal: Principal = ANONYMOUS
    authenticated: bool = True
    sasl: Any = None
    close_after_answer: bool = False


@dataclass
class Context:
    """Shared state of one Kafka listener.

    Attributes:
        broker: The broker behind every protocol.
        host: Advertised host of this listener.
        port: Advertised port of this listener.
        executor: Threads for the broker's blocking calls (produce and its commit wait, reads, admin).
        poll_executor: Threads for Fetch long polls only, so idle consumers never hold up producers.
        state: Per-listener state that handlers keep (groups of the classic protocol, ...).
        security: Authentication and ACLs (open when auth is off).
        sasl_mechanisms: The SASL mechanisms this listener offers (empty when auth is off).
        quota_store: The warehouse's ``_system/quotas`` (Describe/AlterClientQuotas), if the gateway keeps it.
    """

    broker: Broker
    host: str
    port: int
    executor: ThreadPoolExecutor
    poll_executor: ThreadPoolExecutor
    state: dict[str, Any] = field(default_factory=dict)
    security: Security = field(default_factory=Security.open)
    sasl_mechanisms: tuple[str, ...] = ()
    quota_store: QuotaStore | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call on the listener's threads (in the caller's context: its ``CLIENT``)."""
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, ctx.run, fn, *args)

    async def run_poll(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking long poll on the listener's poll threads (in the caller's context)."""
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.poll_executor, ctx.run, fn, *args)
