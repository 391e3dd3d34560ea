"""Prometheus metrics of one gateway: requests, produce/fetch latency and volume, partition end offsets."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topiclake.objectstore import OPS, ProxyProcess
from topiclake.platform import Broker

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _PartitionCollector(Collector):
    """End offsets and commit counts read from the broker's open topic logs at scrape time."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        broker = self._metrics.broker
        end = GaugeMetricFamily(
            "topiclake_partition_end_offset", "High watermark of a partition", labels=["topic", "partition"]
        )
        commits = GaugeMetricFamily(
            "topiclake_topic_commits", "Delta commits made by this broker", labels=["topic"]
        )
        fences = GaugeMetricFamily(
            "topiclake_topic_fences", "Commits fenced by another writer on this topic", labels=["topic"]
        )
        latency = HistogramMetricFamily(
            "topiclake_topic_commit_latency_seconds",
            "Time of this broker's Delta commits of a topic (group commit: from the flusher taking the queue "
            "to its log entry), local append and delta-rs paths alike",
            labels=["topic"],
        )
        committed = CounterMetricFamily(
            "topiclake_topic_committed_records",
            "Records committed to a topic by this broker (records per commit: its rate over the commits' "
            "rate)",
            labels=["topic"],
        )
        rounds = HistogramMetricFamily(
            "topiclake_topic_maintenance_round_seconds",
            "Time of this broker's maintenance rounds of a topic (compaction, checkpoint, cleanup, vacuum): "
            "a partition gains about its commit rate times this many files during one",
            labels=["topic"],
        )
        buffered = GaugeMetricFamily(
            "topiclake_buffer_used_bytes", "Accepted but not yet committed bytes (429 beyond the limit)"
        )
        arrow = GaugeMetricFamily(
            "topiclake_arrow_allocated_bytes",
            "Bytes allocated from Arrow's default memory pool (pool: its allocator)",
            labels=["pool"],
        )
        pool = pa.default_memory_pool()
        arrow.add_metric([pool.backend_name], pool.bytes_allocated())
        if broker is not None:
            buffered.add_metric([], broker.budget.used)
            for log in broker.open_logs():
                stats: dict[str, Any] = log.stats()
                for partition, hwm in stats["high_watermarks"].items():
                    end.add_metric([log.topic, str(partition)], hwm)
                commits.add_metric([log.topic], stats["commits"])
                fences.add_metric([log.topic], stats["fences"])
                times = log.commit_times
                bounds = [f"{ms / 1000:g}" for ms in times.BOUNDS_MS] + ["+Inf"]
                buckets = list(zip(bounds, [float(c) for c in times.counts], strict=True))
                latency.add_metric([log.topic], buckets, times.sum_ms / 1000)
                committed.add_metric([log.topic], times.records)
                upkeep = stats["maintenance"]
                counts = list(itertools.accumulate(upkeep.round_counts))
                les = [f"{b:g}" if b != math.inf else "+Inf" for b in upkeep.ROUND_BOUNDS_S]
                rounds.add_metric(
                    [log.topic], list(zip(les, map(float, counts), strict=True)), upkeep.round_seconds
                )
        yield latency
        yield rounds
        yield committed
        yield buffered
        yield arrow
        yield end
        yield commits
        yield fences


class _ObjectStoreCollector(Collector):
    """Requests to the object store, read from the gateway's counting proxy at scrape time."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily]:
        proxy = self._metrics.object_store
        if proxy is None:
            return
        family = CounterMetricFamily(
            "topiclake_object_store_requests",
            "Requests to the object store by S3 operation, counted by the proxy in front of it",
            labels=["op"],
        )
        counts = proxy.counts()
        for op in OPS:
            family.add_metric([op], counts.get(op, 0))
        yield family


class GatewayMetrics:
    """The metrics registry of one app (one per app, so tests can run several apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.broker: Broker | None = None
        self.object_store: ProxyProcess | None = None  # TOPICLAKE_COUNT_OBJECT_STORE_REQUESTS
        self._produced: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}  # see produced()
        self._requests: dict[tuple[str, str, int], Any] = {}  # see request()
        self.requests = Counter(
            "topiclake_http_requests",
            "HTTP requests by route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.produce_latency = Histogram(
            "topiclake_produce_latency_seconds",
            "Time to answer a produce request, by API and acks",
            ["api", "acks"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.fetch_latency = Histogram(
            "topiclake_fetch_latency_seconds",
            "Time to answer a fetch (including long-poll wait)",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.records_in = Counter(
            "topiclake_produced_records", "Records accepted", ["topic"], registry=self.registry
        )
        self.bytes_in = Counter(
            "topiclake_produced_bytes", "Key+value bytes accepted", ["topic"], registry=self.registry
        )
        self.records_out = Counter(
            "topiclake_fetched_records", "Records returned to consumers", ["topic"], registry=self.registry
        )
        self.bytes_out = Counter(
            "topiclake_fetched_bytes",
            "Key+value bytes returned to consumers",
            ["topic"],
            registry=self.registry,
        )
        self.registry.register(_PartitionCollector(self))
        self.registry.register(_ObjectStoreCollector(self))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def request(self, method: str, template: str, status: int) -> None:
        """Count one answered request (the labelled child is looked up once: the hot path)."""
        key = (method, template, status)
        child = self._requests.get(key)
        if child is None:
            child = self.requests.labels(method, template, str(status))
            if len(self._requests) < _MAX_CACHED:
                self._requests[key] = child
        child.inc()

    def produced(self, topic: str, records: int, nbytes: int, api: str, acks: str, started: float) -> None:
        """Count one produce request (the labelled children are looked up once: the hot path)."""
        children = self._produced.get((topic, api, acks))
        if children is None:
            children = (
                self.records_in.labels(topic),
                self.bytes_in.labels(topic),
                self.produce_latency.labels(api, acks),
            )
            if len(self._produced) < _MAX_CACHED:
                self._produced[(topic, api, acks)] = children
        children[0].inc(records)
        children[1].inc(nbytes)
        children[2].observe(time.perf_counter() - started)

    def fetched(self, topic: str, records: int, nbytes: int, api: str, started: float) -> None:
        """Count one fetch."""
        self.records_out.labels(topic).inc(records)
        self.bytes_out.labels(topic).inc(nbytes)
        self.fetch_latency.labels(api).observe(time.perf_counter() - started)


#: Labelled metric children cached for the hot path, at most this many per cache (one per topic).
_MAX_CACHED = 10_000


class RequestCounter:
    """Pure ASGI middleware counting requests by route template (cheap: no body buffering)."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.request(scope["method"], getattr(scope.get("route"), "path", "unmatched"), status)
