"""How one broker tells another who the client was: a principal signed with the cluster's key.

A broker that forwards a partition's produce or fetch to its leader, or proxies a group request to the
group's coordinator, has already authenticated the client. It sends the principal (and the client's
address) in ``x-topiclake-principal`` as ``v1.<base64url JSON>.<HMAC-SHA256>``, the MAC over the method,
the path and the payload, with a timestamp the receiver accepts for ``MAX_AGE_S``. An outside client
cannot forge it without the key; a header that does not verify is ignored (the request then needs its own
credentials), so setting the header buys nothing.

The key is 32 random bytes kept in the warehouse (Delta table ``_system/broker_key``, written once by the
first broker that needs it): every broker of a cluster can read it, clients of the brokers cannot. Whoever
can read the warehouse can read the key — and every topic, and change the ACLs — so the key adds no new
boundary: storage credentials are the boundary of the warehouse, the ACLs the boundary of the brokers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import StorageError
from topiclake.platform.storage import Storage
from topiclake.security.principal import Principal

logger = logging.getLogger(__name__)

HEADER = "x-topiclake-principal"
#: (principal, client host) of the request being served, set by the listener that authenticated it (HTTP
#: middleware, Kafka listener); a broker forwarding work to another signs it (HttpForwarder). Unset: the
#: forwarded request carries no principal and a broker with auth on refuses it.
CLIENT: ContextVar[tuple[Principal, str] | None] = ContextVar("topiclake_client", default=None)
KEY_TABLE = "broker_key"
MAX_AGE_S = 120.0
_SCHEMA = pa.schema([pa.field("key", pa.binary(), nullable=False), pa.field("created_ms", pa.int64())])
_FOREIGN = (DeltaError, OSError, pa.ArrowException)


def load_or_create_key(storage: Storage) -> bytes:
    """The cluster's inter-broker key from ``_system/broker_key`` (made by the first broker to ask).

    Raises:
        StorageError: The warehouse cannot be read or written.
    """
    uri = storage.system_uri(KEY_TABLE)
    for _ in range(5):
        try:
            if storage.is_table(uri):
                rows = DeltaTable(uri, storage_options=storage.options()).to_pyarrow_table().to_pylist()
                if rows:
                    return bytes(rows[0]["key"])
            data = pa.Table.from_pylist(
                [{"key": secrets.token_bytes(32), "created_ms": int(time.time() * 1000)}], schema=_SCHEMA
            )
            write_deltalake(uri, data, mode="error", storage_options=storage.options())
            logger.info("made the cluster's inter-broker key in %s", uri)
        except _FOREIGN as exc:  # another broker made it first: read theirs
            logger.debug("inter-broker key race on %s: %s", uri, exc)
            time.sleep(0.05)
    raise StorageError(f"cannot read or make the inter-broker key at {uri}", uri=uri)


@dataclass(frozen=True)
class BrokerSigner:
    """Signs and verifies the principal header of inter-broker requests with the cluster's key."""

    key: bytes

    def _mac(self, method: str, path: str, payload: str) -> str:
        msg = f"{method.upper()}\n{path}\n{payload}".encode()
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()

    def sign(self, principal: Principal, host: str, method: str, path: str) -> str:
        """The header value carrying ``principal`` (connected from ``host``) for one request."""
        doc = {"t": principal.type, "n": principal.name, "h": host, "ts": time.time()}
        payload = base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()
        return f"v1.{payload}.{self._mac(method, path, payload)}"

    def verify(self, value: str, method: str, path: str) -> tuple[Principal, str] | None:
        """The principal and client host of a valid header value, or None (forged, stale, malformed)."""
        try:
            version, payload, mac = value.split(".")
            if version != "v1" or not hmac.compare_digest(mac, self._mac(method, path, payload)):
                return None
            doc = json.loads(base64.urlsafe_b64decode(payload))
            if abs(time.time() - float(doc["ts"])) > MAX_AGE_S:
                return None
            return Principal(str(doc["t"]), str(doc["n"])), str(doc["h"])
        except (ValueError, KeyError, TypeError):
            return None
