"""A small synchronous client of the gateway's native HTTP API (``/v1``), over httpx.

Errors come back as the classes of :mod:`topiclake.errors`, rebuilt from the native error body
``{"error": {"code", "message", "retriable", "details"}}``; a code this version does not know becomes a
plain :class:`~topiclake.errors.TopiclakeError` carrying that code. A gateway that cannot be reached raises
:class:`GatewayUnavailable`.

Example::

    with TopiclakeClient("http://127.0.0.1:8082") as tl:
        tl.create_topic("orders", partitions=3)
        tl.produce("orders", [{"key": "k1", "value": {"amount": 3}}])
        batch = tl.fetch("orders", 0, offset=0)

A cluster of brokers: give the client bootstrap servers instead of a URL; it finds every partition's leader
(see :mod:`topiclake.client.cluster`)::

    with TopiclakeClient(bootstrap_servers="127.0.0.1:8082,127.0.0.1:8083") as tl:
        tl.produce("orders", [{"key": "k1", "value": {"amount": 3}}])  # idempotent, to the leader

Modules: ``responses`` (the answers' shapes), ``_wire`` (errors and constants), ``_base`` (transport and
topic admin), ``_records`` (produce, fetch), ``_groups`` (consumer groups), ``cluster`` (bootstrap,
metadata, leaders, retries), ``_produce`` (partitioning and the idempotent producer in a cluster).
"""

from __future__ import annotations

from topiclake.client._client import DEFAULT_DELIVERY_TIMEOUT as DEFAULT_DELIVERY_TIMEOUT
from topiclake.client._client import TopiclakeClient
from topiclake.client._wire import (
    ARROW_STREAM as ARROW_STREAM,
)
from topiclake.client._wire import (
    DEFAULT_URL as DEFAULT_URL,
)
from topiclake.client._wire import (
    NDJSON as NDJSON,
)
from topiclake.client._wire import (
    GatewayUnavailable,
    decode_bytes,
    error_from_body,
)
from topiclake.client.cluster import ClusterView, parse_bootstrap_servers
from topiclake.client.responses import (
    Acks,
    ArrowProduceResponse,
    Assignor,
    BrokerInfo,
    CommittedOffset,
    Encoding,
    FetchedRecord,
    FetchResponse,
    GroupDescription,
    GroupLag,
    GroupListing,
    GroupMember,
    Header,
    HeartbeatResponse,
    JoinResponse,
    Metadata,
    Offsets,
    PartitionLag,
    PartitionOffsets,
    ProduceResponse,
    ProduceResult,
    ProducerId,
    ResetPlan,
    ResetPlanEntry,
    ResetTo,
    Topic,
    TopicPartition,
)
from topiclake.client.responses import (
    PartitionMetadata as PartitionMetadata,
)
from topiclake.client.responses import (
    RecordError as RecordError,
)
from topiclake.client.responses import (
    TopicMetadata as TopicMetadata,
)

__all__ = [
    "Acks",
    "ArrowProduceResponse",
    "Assignor",
    "BrokerInfo",
    "ClusterView",
    "CommittedOffset",
    "Encoding",
    "FetchResponse",
    "FetchedRecord",
    "GatewayUnavailable",
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "GroupMember",
    "Header",
    "HeartbeatResponse",
    "JoinResponse",
    "Metadata",
    "Offsets",
    "PartitionLag",
    "PartitionOffsets",
    "ProduceResponse",
    "ProduceResult",
    "ProducerId",
    "ResetPlan",
    "ResetPlanEntry",
    "ResetTo",
    "Topic",
    "TopicPartition",
    "TopiclakeClient",
    "decode_bytes",
    "error_from_body",
    "parse_bootstrap_servers",
]
