"""Client quotas on the Kafka listener (topiclake.security.quotas), as a Kafka broker applies them.

Every request is counted against its principal's request rate, a Produce request's frame against its
produce byte rate, a Fetch answer against its fetch byte rate. A request that leaves its principal in debt
is still answered in full (nothing accepted is dropped), with ``throttle_time_ms`` set, and the answer is
held back that long, so the client's pipeline drains at the quota's pace (Kafka's broker-side delay;
clients also back off by ``throttle_time_ms``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from topiclake.kafka import codec
from topiclake.security import ANONYMOUS
from topiclake.security.quotas import QuotaKind, Quotas

PRODUCE, FETCH = 0, 1
#: the longest a single answer is held back; a larger debt throttles the next answers too
MAX_DELAY_MS = 10_000


def throttle_ms(
    quotas: Quotas, principal: object, peer: object, api_key: int, request_bytes: int, response_bytes: int
) -> int:
    """Count one request; the time its answer must be held back (0 when within quota)."""
    name = str(principal or ANONYMOUS)
    client = peer[0] if name == str(ANONYMOUS) and isinstance(peer, tuple) and peer else ""
    wait = quotas.record(name, QuotaKind.REQUEST, 1, str(client))
    if api_key == PRODUCE:
        wait = max(wait, quotas.record(name, QuotaKind.PRODUCE, request_bytes, str(client)))
    elif api_key == FETCH:
        wait = max(wait, quotas.record(name, QuotaKind.FETCH, response_bytes, str(client)))
    return min(wait, MAX_DELAY_MS)


async def throttled(
    quotas: Quotas, state: object, peer: object, frame: bytes, data: dict[str, Any], out: bytes
) -> bytes:
    """Count a request and its encoded answer ``out``; when throttled, the answer with its throttle time
    (kio's ``throttle_time`` is Kafka's ``throttle_time_ms``), returned only after that long."""
    api_key, version, correlation_id = codec.peek_header(frame)
    principal = getattr(state, "principal", None)  # set by SASL/mTLS authentication when it is on
    wait = throttle_ms(quotas, principal, peer, api_key, len(frame), len(out))
    if wait <= 0:
        return out
    out = codec.encode_response(api_key, version, correlation_id, {**data, "throttle_time": wait})
    await asyncio.sleep(wait / 1000)
    return out
