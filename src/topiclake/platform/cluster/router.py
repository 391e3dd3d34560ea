"""Where a partition's work runs: here when this broker leads it, else at its leader, forwarded.

:class:`Router` is what a clustered :class:`~topiclake.platform.Broker` consults before it appends, fetches
or resolves offsets. While leadership moves (a dead leader, a view one tick old) it looks again, for up to
``forward_timeout_ms``, before it answers NotLeader with the leader it last knew.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa

from topiclake.errors import InvalidRecord, NotLeader, TopiclakeError
from topiclake.platform.cluster.metadata import BrokerEndpoint
from topiclake.platform.cluster.node import ClusterNode
from topiclake.platform.cluster.routing import FORWARDED, Forwarder
from topiclake.platform.records import ProducerInfo, RecordResult

_T = TypeVar("_T")

#: Appends one partition's rows here (this broker leads it): one result per row.
LocalAppend = Callable[[int, pa.Table], list[RecordResult]]


class Router:
    """Runs partition work on the partition's leader.

    Args:
        node: This broker's view of the cluster.
        forwarder: How to reach other brokers (None: answer NotLeader instead of forwarding).
        forward_timeout_ms: How long to keep looking for a leader that answers.
    """

    def __init__(self, node: ClusterNode, forwarder: Forwarder | None, forward_timeout_ms: int) -> None:
        self.node = node
        self._forwarder = forwarder
        self._timeout_s = forward_timeout_ms / 1000
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="forward")

    def close(self) -> None:
        """Stop the forwarding threads (requests still running finish on their own)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def forwarder(self) -> Forwarder:
        """The forwarder (raises NotLeader when there is none)."""
        if self._forwarder is None:
            raise NotLeader("this broker cannot forward: no forwarder is configured")
        return self._forwarder

    def on_leader(
        self, topic: str, partition: int, local: Callable[[], _T], remote: Callable[[BrokerEndpoint], _T]
    ) -> _T:
        """``local()`` if this broker leads the partition, else ``remote(leader)``.

        Raises:
            NotLeader: No leader could serve it in time, or the request was already forwarded to us.
        """
        node = self.node
        me = node.broker_id
        deadline = time.monotonic() + self._timeout_s
        last: TopiclakeError | None = None
        while True:
            state = node.partition(topic, partition)
            leader = -1 if state is None else state.leader
            mine = leader == me and not node.isolated
            if not mine and (FORWARDED.get() or self._forwarder is None):
                raise NotLeader(
                    f"broker {me} does not lead {topic}-{partition}; its leader is broker {leader}",
                    topic=topic,
                    partition=partition,
                    leader_id=leader,
                )
            try:
                if mine:
                    return local()
                target = node.endpoint_of(leader)
                if target is not None:
                    return remote(target)
                last = NotLeader(
                    f"the leader of {topic}-{partition} (broker {leader}) is not alive: waiting for another",
                    topic=topic,
                    partition=partition,
                    leader_id=leader,
                )
            except NotLeader as exc:  # leadership moved under us, or the leader is unreachable
                last = exc
            if time.monotonic() >= deadline:
                raise NotLeader(
                    f"{topic}-{partition} could not be served within {self._timeout_s:.0f} s: "
                    f"{last.message if last else 'no leader'}",
                    topic=topic,
                    partition=partition,
                    leader_id=leader,
                )
            node.poke()
            time.sleep(0.1)

    def produce(
        self,
        topic: str,
        table: pa.Table,
        targets: list[int],
        acks: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
        local: LocalAppend,
    ) -> list[RecordResult]:
        """Produce rows (input columns, ``targets`` their partitions): one append or forward per
        partition, concurrently; a partition that cannot be served in time fails its own rows only."""
        by_part: dict[int, list[int]] = {}
        for row, p in enumerate(targets):
            by_part.setdefault(p, []).append(row)
        if producer is not None and len(by_part) > 1:
            raise InvalidRecord(
                "in a cluster an idempotent request must target one partition: send each partition's "
                "records in their own request (?partition=N)",
                topic=topic,
            )

        def one(p: int, rows: list[int]) -> list[RecordResult]:
            sub = table if len(rows) == table.num_rows else table.take(pa.array(rows, pa.int64()))
            try:
                return self.on_leader(
                    topic,
                    p,
                    lambda: local(p, sub),
                    lambda t: self.forwarder.produce(t, topic, p, sub, acks, producer, timeout_ms),
                )
            except TopiclakeError as exc:
                return [RecordResult(p, None, None, exc)] * len(rows)

        # each task runs in its own copy of this request's context: FORWARDED travels with it
        futures = {
            p: self._pool.submit(contextvars.copy_context().run, one, p, rows) for p, rows in by_part.items()
        }
        results: list[RecordResult | None] = [None] * table.num_rows
        for p, future in futures.items():
            for row, res in zip(by_part[p], future.result(), strict=True):
                results[row] = res
        return results  # type: ignore[return-value]
