"""Request handlers, one module per family of APIs; :data:`HANDLERS` maps an API key to its handler.

A handler takes the listener's :class:`~topiclake.kafka.context.Context` and the parsed request and returns
the response as a neutral dict (fitted to the request's version by :func:`topiclake.kafka.codec.build`),
or None for a request that gets no answer (Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from topiclake.kafka import errors as kerr
from topiclake.kafka import sasl
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.kafka.handlers import (
    acls,
    admin,
    cluster,
    consumer_groups,
    fetch,
    groups,
    produce,
    quotas,
    transactions,
    txn_admin,
)
from topiclake.kafka.versions import SUPPORTED

Handler = Callable[[Context, Request], Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, Handler] = {
    0: produce.produce,
    1: fetch.fetch,
    2: fetch.list_offsets,
    3: cluster.metadata,
    8: groups.offset_commit,
    9: groups.offset_fetch,
    10: groups.find_coordinator,
    11: groups.join_group,
    12: groups.heartbeat,
    13: groups.leave_group,
    14: groups.sync_group,
    15: groups.describe_groups,
    16: groups.list_groups,
    17: sasl.sasl_handshake,
    18: cluster.api_versions,
    19: cluster.create_topics,
    20: cluster.delete_topics,
    22: produce.init_producer_id,
    24: transactions.add_partitions_to_txn,
    25: transactions.add_offsets_to_txn,
    26: transactions.end_txn,
    27: txn_admin.write_txn_markers,
    28: transactions.txn_offset_commit,
    29: acls.describe_acls,
    30: acls.create_acls,
    31: acls.delete_acls,
    32: admin.describe_configs,
    33: admin.alter_configs,
    36: sasl.sasl_authenticate,
    37: admin.create_partitions,
    42: groups.delete_groups,
    44: admin.incremental_alter_configs,
    47: groups.offset_delete,
    48: quotas.describe_client_quotas,
    49: quotas.alter_client_quotas,
    61: txn_admin.describe_producers,
    65: transactions.describe_transactions,
    66: transactions.list_transactions,
    68: consumer_groups.consumer_group_heartbeat,
    69: consumer_groups.consumer_group_describe,
}

assert set(HANDLERS) == set(SUPPORTED), "ApiVersions must advertise exactly the implemented keys"


def api_versions_fallback(transaction_version: int) -> dict[str, Any]:
    """KIP-511: an ApiVersions of a version we do not know is answered in v0 with UNSUPPORTED_VERSION."""
    return {"error_code": kerr.UNSUPPORTED_VERSION, "api_keys": cluster.api_keys(transaction_version)}


def error_response(code: int) -> dict[str, Any]:
    """A response with only a top-level error code (lists empty): for requests that failed as a whole."""
    return {"error_code": code}


__all__ = ["HANDLERS", "Handler", "api_versions_fallback", "error_response"]
