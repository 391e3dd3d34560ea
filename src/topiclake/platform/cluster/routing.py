"""Requests for partitions another broker leads: the seam through which a broker forwards them.

The platform decides *where* a record goes (the partition's leader); an edge (the HTTP gateway) supplies a
:class:`Forwarder` that knows *how* to reach another broker. A request that already came from another
broker is never forwarded again (:data:`FORWARDED`): if this broker does not lead the partition either,
it answers NotLeader and the first broker looks again.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

import pyarrow as pa

from topiclake.platform.cluster.metadata import BrokerEndpoint
from topiclake.platform.records import FetchResult, ProducerInfo, RecordResult

#: True while serving a request another broker forwarded (set by the edge that received it).
FORWARDED: ContextVar[bool] = ContextVar("topiclake_forwarded", default=False)

#: The HTTP header that marks a forwarded request (its value: the forwarding broker's id).
FORWARDED_HEADER = "x-topiclake-forwarded-by"


class Forwarder(Protocol):
    """Sends one partition's work to the broker that leads it."""

    def produce(
        self,
        target: BrokerEndpoint,
        topic: str,
        partition: int,
        table: pa.Table,
        acks: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
    ) -> list[RecordResult]:
        """Append ``table`` (input columns) to one partition at ``target``; one result per row."""
        ...

    def fetch(
        self,
        target: BrokerEndpoint,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
        wait_ms: float,
    ) -> FetchResult:
        """Fetch committed records of one partition from ``target``."""
        ...

    def list_offsets(self, target: BrokerEndpoint, topic: str, partition: int, spec: str | int) -> int | None:
        """Resolve ``earliest``/``latest``/a timestamp for one partition at ``target``."""
        ...
