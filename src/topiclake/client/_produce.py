"""Producing to a cluster: Kafka's partitioner on the client, one request per partition to its leader,
and the idempotent producer's per-partition sequence numbers, so that a retry never duplicates.

Each partition a client writes to gets its own producer id (``POST /v1/producers``) and sequence space:
record ``i`` of a request has sequence ``sequence + i``. A request names its one partition
(``?partition=P``), so a broker that counts sequences per partition and one that counts them per topic
agree on what a retry is. Requests to one partition are sent one at a time (their order is the log's);
partitions with different leaders are sent in parallel.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import orjson

from topiclake.client.cluster import ClusterRouter
from topiclake.client.responses import ProduceResponse, ProduceResult, ProducerId
from topiclake.errors import InvalidRequest, TopiclakeError

if TYPE_CHECKING:
    from topiclake.platform.partitioner import Partitioner

logger = logging.getLogger(__name__)

#: Kafka's sequence numbers are 32-bit; a producer id whose sequences would pass this gets replaced.
MAX_SEQUENCE = 2**31 - 1
#: Most partitions (leaders) written to in parallel by one produce call.
MAX_PARALLEL = 8


def key_bytes(key: Any, encoding: str) -> bytes | None:
    """The bytes a broker stores for a record's key (what Kafka's partitioner hashes).

    As the gateway encodes them: ``json`` stores a string key as its UTF-8 text and any other value as its
    JSON text; ``binary`` is base64; ``string`` is UTF-8. A key the gateway will refuse hashes as None.
    """
    if key is None:
        return None
    if encoding == "json":
        return key.encode() if isinstance(key, str) else orjson.dumps(key)
    if not isinstance(key, str):
        return None
    if encoding == "binary":
        try:
            return base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            return None
    return key.encode()


@dataclass
class _Slot:
    """The producer id and next sequence of one partition; its lock orders requests to the partition."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    producer: ProducerId | None = None
    next_sequence: int = 0


class ProducerSequences:
    """Per-partition producer ids and sequence numbers of one client.

    Args:
        init_producer: Asks the cluster for a new producer id and epoch.
    """

    def __init__(self, init_producer: Callable[[], ProducerId]) -> None:
        self._init = init_producer
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, int], _Slot] = {}

    def slot(self, topic: str, partition: int) -> _Slot:
        """The slot of a partition (created on first use)."""
        with self._lock:
            return self._slots.setdefault((topic, partition), _Slot())

    def producer_for(self, slot: _Slot, count: int) -> dict[str, int]:
        """The ``producer`` object of the next request of ``count`` records (caller holds ``slot.lock``)."""
        if slot.producer is None or slot.next_sequence + count > MAX_SEQUENCE:
            slot.producer = self._init()
            slot.next_sequence = 0
        return {
            "id": slot.producer["producer_id"],
            "epoch": slot.producer["epoch"],
            "sequence": slot.next_sequence,
        }


class ClusterProducer:
    """Produce calls of a client with ``bootstrap_servers``.

    Args:
        router: The client's cluster router.
        init_producer: Asks any broker for a new producer id.
        delivery_timeout: Seconds a produce call may take with its retries (``delivery.timeout.ms``).
        request_timeout: Seconds one request may take (the client's timeout).
    """

    def __init__(
        self,
        router: ClusterRouter,
        init_producer: Callable[[], ProducerId],
        *,
        delivery_timeout: float,
        request_timeout: float,
    ) -> None:
        self.router = router
        self.delivery_timeout = delivery_timeout
        self.request_timeout = request_timeout
        self.sequences = ProducerSequences(init_producer)
        from topiclake.platform.partitioner import Partitioner  # pyarrow: only for clusters

        self.partitioner: Partitioner = Partitioner()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def close(self) -> None:
        """Stop the threads that send to several leaders at once."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_PARALLEL, thread_name_prefix="topiclake-produce")
            return self._pool

    # ------------------------------------------------------------------ partitions

    def partition_count(self, topic: str, deadline: float) -> int:
        """The topic's partition count from the metadata (read again once when it does not list it)."""
        what = f"metadata of {topic}"
        count = self.router.with_retries(
            what, lambda view: view.partitions(topic), deadline=deadline, safe_to_repeat=True
        )  # waits out a moment when no broker answers
        if count is None:
            count = self.router.with_retries(
                what,
                lambda _: self.router.view(refresh=True).partitions(topic),
                deadline=deadline,
                safe_to_repeat=True,
            )
        if count is None:
            path = "/v1/topics/" + quote(topic, safe="")
            doc = self.router.call_any(
                lambda base: orjson.loads(self.router.send(base, "GET", path).content), safe_to_repeat=True
            )  # raises TopicNotFound for a topic that does not exist
            count = int(doc["partitions"])
        return count

    def assign(
        self, records: Sequence[Mapping[str, Any]], partition: int | None, encoding: str, count: int
    ) -> list[int]:
        """The partition of each record: its own ``partition``, else the call's, else Kafka's partitioner."""
        out: list[int | None] = []
        hashed: list[int] = []
        keys: list[bytes | None] = []
        for i, rec in enumerate(records):
            own = rec.get("partition") if isinstance(rec, Mapping) else None
            chosen = own if isinstance(own, int) and not isinstance(own, bool) else partition
            out.append(chosen)
            if chosen is None:
                hashed.append(i)
                keys.append(key_bytes(rec.get("key") if isinstance(rec, Mapping) else None, encoding))
        if hashed:
            for i, p in zip(hashed, self.partitioner.assign(keys, count), strict=True):
                out[i] = p
        return [cast(int, p) for p in out]

    # ------------------------------------------------------------------ produce

    def produce(
        self,
        topic: str,
        path: str,
        records: Sequence[Mapping[str, Any]],
        *,
        acks: str,
        partition: int | None,
        encoding: str,
        idempotent: bool,
    ) -> ProduceResponse:
        """Produce ``records`` to their partitions' leaders; results in the order of ``records``.

        A partition whose records could not be delivered before the delivery timeout gets the error on
        each of its records; when no partition could be delivered, the first error is raised.
        """
        if idempotent and acks not in ("all", "-1"):
            raise InvalidRequest("the idempotent producer needs acks=all", acks=acks)
        if not records:
            raise InvalidRequest("records must not be empty")
        deadline = time.monotonic() + self.delivery_timeout
        count = self.partition_count(topic, deadline)
        parts = self.assign(records, partition, encoding, count)
        batches: dict[int, list[int]] = {}
        for i, p in enumerate(parts):
            batches.setdefault(p, []).append(i)
        view = self.router.view()
        by_leader: dict[int | None, list[int]] = {}
        for p in batches:
            by_leader.setdefault(view.leader(topic, p), []).append(p)

        def send_leader(partitions: list[int]) -> dict[int, list[ProduceResult] | TopiclakeError]:
            done: dict[int, list[ProduceResult] | TopiclakeError] = {}
            for p in partitions:
                batch = [records[i] for i in batches[p]]
                try:
                    done[p] = self._send_partition(
                        topic, path, p, batch, acks, encoding, idempotent, deadline
                    )
                except TopiclakeError as exc:
                    done[p] = exc
            return done

        outcome: dict[int, list[ProduceResult] | TopiclakeError] = {}
        groups = list(by_leader.values())
        if len(groups) == 1:
            outcome.update(send_leader(groups[0]))
        else:
            futures: list[Future[dict[int, list[ProduceResult] | TopiclakeError]]] = [
                self._executor().submit(send_leader, g) for g in groups
            ]
            for fut in futures:
                outcome.update(fut.result())
        failures = [v for v in outcome.values() if isinstance(v, TopiclakeError)]
        if failures and len(failures) == len(outcome):
            raise failures[0]
        results: list[ProduceResult | None] = [None] * len(records)
        for p, indices in batches.items():
            got = outcome[p]
            for n, i in enumerate(indices):
                if isinstance(got, TopiclakeError):
                    results[i] = {
                        "partition": p,
                        "offset": None,
                        "timestamp": None,
                        "error": {"code": got.code, "message": got.message},
                    }
                else:
                    results[i] = got[n]
        return {"topic": topic, "results": cast(list[ProduceResult], results)}

    def _send_partition(
        self,
        topic: str,
        path: str,
        partition: int,
        batch: list[Mapping[str, Any]],
        acks: str,
        encoding: str,
        idempotent: bool,
        deadline: float,
    ) -> list[ProduceResult]:
        params = {"acks": acks, "partition": partition, "encoding": encoding}
        body: dict[str, Any] = {"records": list(batch)}

        def call(base: str) -> list[ProduceResult]:
            timeout = max(0.1, min(self.request_timeout, deadline - time.monotonic()))
            resp = self.router.send(base, "POST", path, json=body, params=params, timeout=timeout)
            return cast(list[ProduceResult], orjson.loads(resp.content)["results"])

        if not idempotent:
            return self.router.call_leader(topic, partition, call, deadline=deadline, safe_to_repeat=False)
        slot = self.sequences.slot(topic, partition)
        with slot.lock:
            try:
                body["producer"] = self.router.with_retries(
                    "init producer id",
                    lambda _: self.sequences.producer_for(slot, len(batch)),
                    deadline=deadline,
                    safe_to_repeat=True,
                )
                results = self.router.call_leader(
                    topic, partition, call, deadline=deadline, safe_to_repeat=True
                )
            except TopiclakeError:
                # The last request may or may not have landed: its sequence is unknowable, start afresh.
                slot.producer = None
                raise
            if any(r["error"] is not None for r in results):
                slot.producer = None
            else:
                slot.next_sequence += len(batch)
            return results
