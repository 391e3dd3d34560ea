"""SASL on the Kafka listener: SaslHandshake (v1) and SaslAuthenticate (v0-2), PLAIN and SCRAM-SHA-256/512.

The flow is Kafka's (KIP-152): ApiVersions, then SaslHandshake naming a mechanism, then SaslAuthenticate
requests carrying the mechanism's bytes. With auth on, any other request before the exchange succeeded
closes the connection (as Kafka does). A failed exchange is answered with SASL_AUTHENTICATION_FAILED and a
message that never says whether the user or the password was wrong, and then the connection is closed.

PLAIN (RFC 4616) checks the password against the users file (bcrypt). SCRAM (RFC 5802/7677) runs with
``scramp``'s server against the salted keys ``topiclake users add`` stored; an unknown user is answered
with made-up keys derived from its name, so it fails at the same step as a wrong password.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramException, ScramMechanism

from topiclake.kafka import errors as kerr
from topiclake.kafka.codec import Request
from topiclake.kafka.context import ConnectionState, Context
from topiclake.security import SCRAM_MECHANISMS, Principal, Security

logger = logging.getLogger(__name__)

PLAIN = "PLAIN"
#: Every mechanism the listener implements.
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
_DUMMY_KEY = secrets.token_bytes(32)


def mechanisms(security: Security, tls: bool, configured: str | None) -> tuple[str, ...]:
    """The mechanisms a listener offers: none with auth off; else ``configured`` (comma-separated), or by
    default SCRAM-SHA-256/512, plus PLAIN when the listener speaks TLS (PLAIN sends the password itself).

    Raises:
        ValueError: ``configured`` names a mechanism that is not implemented.
    """
    if not security.auth:
        return ()
    if configured:
        chosen = tuple(m.strip().upper() for m in configured.split(",") if m.strip())
        unknown = [m for m in chosen if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"unknown SASL mechanism(s) {unknown}: choose from {', '.join(MECHANISMS)}")
        if PLAIN in chosen and not tls:
            logger.warning(
                "SASL/PLAIN over plain text: passwords cross the network readable (SASL_PLAINTEXT)"
            )
        return chosen
    return (*SCRAM_MECHANISMS, PLAIN) if tls else SCRAM_MECHANISMS


@dataclass
class SaslExchange:
    """One connection's SASL exchange: the mechanism chosen at the handshake, then its progress."""

    mechanism: str
    scram: Any = None
    user: str | None = None
    done: bool = False
    steps: list[str] = field(default_factory=list)


def _failed(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        + mechanism
    )


async def sasl_handshake(ctx: Context, req: Request) -> dict[str, Any]:
    """SaslHandshake: choose a mechanism (UNSUPPORTED_SASL_MECHANISM lists the offered ones)."""
    conn: ConnectionState = req.connection
    offered = list(ctx.sasl_mechanisms)
    if not offered or (conn.sasl is not None and conn.sasl.done):
        return {"error_code": kerr.ILLEGAL_SASL_STATE, "mechanisms": offered}
    mechanism = str(req.body.mechanism)
    if mechanism not in offered:
        return {"error_code": kerr.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
    conn.sasl = SaslExchange(mechanism)
    return {"error_code": 0, "mechanisms": offered}


def _plain(security: Security, exchange: SaslExchange, data: bytes) -> Principal | None:
    parts = data.split(b"\0")
    if len(parts) != 3:
        return None
    authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    exchange.user = user
    if not user or (authzid and authzid != user):
        return None
    return security.check_password(user, password)


def _scram_keys(security: Security, mechanism: str, user: str) -> tuple[bytes, bytes, bytes, int]:
    cred = security.users.scram_credential(user, mechanism) if security.users is not None else None
    if cred is not None:
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations
    # unknown user: keys no password matches, the same for the same name, so the exchange fails at the
    # proof like a wrong password does
    seed = hmac.new(_DUMMY_KEY, f"{mechanism}:{user}".encode(), hashlib.sha256).digest()
    return seed[:16], seed, hashlib.sha256(seed).digest(), 4096


def _scram_step(security: Security, exchange: SaslExchange, data: bytes) -> tuple[bytes, Principal | None]:
    """One SCRAM message in, the server's answer out; the principal once the proof checked out.

    Raises:
        ScramException: The message is malformed or the proof is wrong.
    """
    text = data.decode("utf-8")
    if exchange.scram is None:

        def keys(user: str) -> tuple[bytes, bytes, bytes, int]:
            exchange.user = user
            return _scram_keys(security, exchange.mechanism, user)

        exchange.scram = ScramMechanism(exchange.mechanism).make_server(keys)
        exchange.scram.set_client_first(text)
        return exchange.scram.get_server_first().encode(), None
    exchange.scram.set_client_final(text)
    final = exchange.scram.get_server_final().encode()
    assert exchange.user is not None
    return final, Principal("User", exchange.user)


def _authenticate_sync(
    security: Security, exchange: SaslExchange, data: bytes
) -> tuple[bytes, Principal | None]:
    if exchange.mechanism == PLAIN:
        principal = _plain(security, exchange, data)
        if principal is None:
            raise ScramException("bad PLAIN credentials")
        return b"", principal
    return _scram_step(security, exchange, data)


async def sasl_authenticate(ctx: Context, req: Request) -> dict[str, Any]:
    """SaslAuthenticate: one step of the chosen mechanism; SASL_AUTHENTICATION_FAILED ends the connection."""
    conn: ConnectionState = req.connection
    exchange: SaslExchange | None = conn.sasl
    if not ctx.sasl_mechanisms or (exchange is not None and exchange.done):  # Kafka's answer; stays open
        message = "SaslAuthenticate request received after successful authentication"
        return {"error_code": kerr.ILLEGAL_SASL_STATE, "error_message": message, "auth_bytes": b""}
    if exchange is None:
        conn.close_after_answer = True
        return {
            "error_code": kerr.ILLEGAL_SASL_STATE,
            "error_message": "SaslHandshake first",
            "auth_bytes": b"",
        }
    try:
        answer, principal = await ctx.run(
            _authenticate_sync, ctx.security, exchange, bytes(req.body.auth_bytes)
        )
    except Exception as exc:  # scramp raises ScramException, and others on bytes it cannot read
        logger.info(
            "kafka %s: SASL %s authentication failed for %r: %s",
            conn.host,
            exchange.mechanism,
            exchange.user,
            exc,
        )
        conn.close_after_answer = True
        return {
            "error_code": kerr.SASL_AUTHENTICATION_FAILED,
            "error_message": _failed(exchange.mechanism),
            "auth_bytes": b"",
        }
    if principal is not None:
        exchange.done = True
        conn.principal = principal
        conn.authenticated = True
        logger.info("kafka %s: authenticated as %s with SASL %s", conn.host, principal, exchange.mechanism)
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime": 0}
