"""Cluster awareness: bootstrap servers, the metadata of the cluster, leaders, and retries with backoff.

A client given ``bootstrap_servers`` reads ``GET /v1/metadata`` from the first broker that answers and keeps
the view: every broker's HTTP address and the leader of every partition. Produce and fetch requests go to
the partition's leader; everything else to any broker that answers (every broker serves every request).

When a broker is gone (connection refused or reset), a request times out, or a broker answers
``not_leader``, the router refreshes the metadata, waits (exponential backoff with jitter, from
``retry_backoff`` up to ``retry_backoff_max``) and tries again, until the request's deadline. A request
that may have been written before it failed (the connection broke after it was sent, a timeout) is
retried only when repeating it is safe: reads always, produce requests only with the idempotent producer.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import httpx
import orjson

from topiclake.client._wire import GatewayUnavailable
from topiclake.client.responses import Metadata
from topiclake.errors import (
    BrokerClosed,
    InvalidRequest,
    NotLeader,
    RequestTimedOut,
    Throttled,
    TopiclakeError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Default port of a bootstrap server given without one (the gateway's default).
DEFAULT_PORT = 8082


#: Sends one request to a broker's base URL and returns the answer (raises the gateway's error).
Send = Callable[..., httpx.Response]


def parse_bootstrap_servers(spec: str | Sequence[str]) -> list[str]:
    """Base URLs of the brokers in ``"host:port[,host:port...]"`` (or a list of such entries).

    An entry may also be a full URL (``https://broker-1:8443``); ``host`` alone means port 8082.

    Raises:
        InvalidRequest: No entry, or an entry that is not ``host[:port]``.
    """
    items = spec.split(",") if isinstance(spec, str) else [s for item in spec for s in item.split(",")]
    urls: list[str] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if "://" in item:
            url = item.rstrip("/")
        else:
            host, sep, port = item.rpartition(":")
            if not sep:
                host, port = item, str(DEFAULT_PORT)
            if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
                raise InvalidRequest(f"bootstrap server {item!r} is not host:port", server=item)
            url = f"http://{host}:{int(port)}"
        if url not in urls:
            urls.append(url)
    if not urls:
        raise InvalidRequest("no bootstrap server given: expected host:port[,host:port...]")
    return urls


def _broker_url(broker: dict[str, Any], scheme: str) -> str:
    listener = (broker.get("listeners") or {}).get("http")
    if isinstance(listener, str) and listener:
        return f"{scheme}://{listener}"
    return f"{scheme}://{broker['host']}:{broker['port']}"


@dataclass(frozen=True)
class ClusterView:
    """The cluster as one broker described it: broker addresses and each partition's leader.

    Attributes:
        doc: The metadata document as answered.
        source: Base URL of the broker that answered.
        brokers: Broker id to base URL.
        leaders: Topic to the leader id of each partition (-1: none).
        fetched_at: ``time.monotonic()`` when it was read.
    """

    doc: Metadata
    source: str
    brokers: dict[int, str]
    leaders: dict[str, tuple[int, ...]]
    fetched_at: float = field(default_factory=time.monotonic)

    @classmethod
    def from_metadata(cls, doc: Metadata, source: str) -> ClusterView:
        """Build the view from a ``/v1/metadata`` answer of the broker at ``source``."""
        scheme = urlsplit(source).scheme or "http"
        brokers = {int(b["id"]): _broker_url(cast(dict[str, Any], b), scheme) for b in doc["brokers"]}
        leaders = {
            t["name"]: tuple(
                int(p["leader"]) for p in sorted(t["partitions"], key=lambda p: int(p["partition"]))
            )
            for t in doc["topics"]
        }
        return cls(doc, source, brokers, leaders)

    def partitions(self, topic: str) -> int | None:
        """The partition count of ``topic``, or None if the metadata does not list it."""
        leaders = self.leaders.get(topic)
        return None if leaders is None else len(leaders)

    def leader(self, topic: str, partition: int) -> int | None:
        """The leader of a partition, or None when unknown or not a live broker."""
        leaders = self.leaders.get(topic, ())
        if not 0 <= partition < len(leaders):
            return None
        leader = leaders[partition]
        return leader if leader in self.brokers else None

    def leader_url(self, topic: str, partition: int) -> str | None:
        """Base URL of the partition's leader, or None when unknown."""
        leader = self.leader(topic, partition)
        return None if leader is None else self.brokers[leader]


def may_retry(exc: TopiclakeError, *, safe_to_repeat: bool) -> bool:
    """Whether a failed request should be sent again (after a metadata refresh and a pause).

    Surely-not-written failures (no connection, ``not_leader``, throttled, broker closing) always are;
    failures after which the request may have been written (a broken connection, a timeout, a retriable
    server error) only when ``safe_to_repeat``.
    """
    if isinstance(exc, NotLeader | Throttled | BrokerClosed):
        return True
    if isinstance(exc, GatewayUnavailable):
        return safe_to_repeat or exc.details.get("connected") is False
    if isinstance(exc, RequestTimedOut):
        return safe_to_repeat
    return exc.retriable and safe_to_repeat


class ClusterRouter:
    """Routes a client's requests over the brokers of a cluster; thread-safe.

    Args:
        bootstrap: Base URLs to read the metadata from first (see :func:`parse_bootstrap_servers`).
        send: Sends one request to one broker (the client's transport).
        retry_backoff: First pause between attempts, seconds (Kafka's ``retry.backoff.ms``).
        retry_backoff_max: Longest pause, seconds (``retry.backoff.max.ms``).
        metadata_max_age: Seconds after which the metadata is read again even without an error.
    """

    def __init__(
        self,
        bootstrap: Sequence[str],
        send: Send,
        *,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        metadata_max_age: float = 300.0,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.send = send
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.metadata_max_age = metadata_max_age
        self._lock = threading.Lock()
        self._view: ClusterView | None = None
        self._preferred = self.bootstrap[0]

    # ------------------------------------------------------------------ brokers

    @property
    def preferred(self) -> str:
        """Base URL of the broker that answered last (where requests for no partition go first)."""
        return self._preferred

    def candidates(self) -> list[str]:
        """Brokers to try, in order: the last that answered, the live brokers, the bootstrap servers."""
        view = self._view
        known = list(view.brokers.values()) if view is not None else []
        out: list[str] = []
        for url in [self._preferred, *known, *self.bootstrap]:
            if url not in out:
                out.append(url)
        return out

    def call_any(self, call: Callable[[str], T], *, safe_to_repeat: bool = False) -> T:
        """Run ``call(base_url)`` on the first broker that answers.

        A broker that cannot be connected to is skipped; one whose connection broke after the request
        was sent is skipped only when ``safe_to_repeat``.

        Raises:
            GatewayUnavailable: No broker answered.
        """
        tried: list[str] = []
        for base in self.candidates():
            try:
                result = call(base)
            except GatewayUnavailable as exc:
                if exc.details.get("connected") is not False and not safe_to_repeat:
                    raise
                logger.debug("broker %s unavailable: %s", base, exc.message)
                tried.append(base)
                continue
            self._preferred = base
            return result
        raise GatewayUnavailable(
            f"no broker of the cluster answered (tried {', '.join(tried)}): is `topiclake serve` running?",
            tried=tried,
            connected=False,
        )

    # ------------------------------------------------------------------ metadata

    def refresh(self) -> ClusterView:
        """Read the metadata again from any broker that answers.

        Raises:
            GatewayUnavailable: No broker answered.
        """

        def read(base: str) -> ClusterView:
            doc = cast(Metadata, orjson.loads(self.send(base, "GET", "/v1/metadata").content))
            return ClusterView.from_metadata(doc, base)

        view = self.call_any(read, safe_to_repeat=True)
        with self._lock:
            self._view = view
        logger.debug(
            "metadata from %s: controller %s, brokers %s",
            view.source,
            view.doc["controller_id"],
            view.brokers,
        )
        return view

    def view(self, *, refresh: bool = False) -> ClusterView:
        """The current view of the cluster (read when missing, too old, or ``refresh``)."""
        view = self._view
        if refresh or view is None or time.monotonic() - view.fetched_at > self.metadata_max_age:
            return self.refresh()
        return view

    # ------------------------------------------------------------------ retries

    def pause(self, attempt: int, exc: TopiclakeError, deadline: float) -> bool:
        """Sleep before attempt ``attempt + 1``; False (no sleep) when the deadline would pass first."""
        if isinstance(exc, Throttled):
            delay = max(getattr(exc, "retry_after_ms", 100), 1) / 1000
        else:
            delay = min(self.retry_backoff * 2 ** (attempt - 1), self.retry_backoff_max)
            delay *= random.uniform(0.8, 1.2)
        if time.monotonic() + delay >= deadline:
            return False
        time.sleep(delay)
        return True

    def with_retries(
        self,
        what: str,
        attempt: Callable[[ClusterView], T],
        *,
        deadline: float,
        safe_to_repeat: bool,
    ) -> T:
        """Run ``attempt(view)`` until it succeeds, refreshing the metadata after each retriable failure.

        Args:
            what: What is attempted (for logs).
            attempt: Sends the request given the current view.
            deadline: ``time.monotonic()`` after which the last error is raised.
            safe_to_repeat: Repeating a request that may have been written is harmless.

        Raises:
            TopiclakeError: The last error, when it is not retriable or the deadline passed.
        """
        tries = 0
        stale = False
        while True:
            tries += 1
            try:
                return attempt(self.view(refresh=stale))
            except TopiclakeError as exc:
                if not may_retry(exc, safe_to_repeat=safe_to_repeat):
                    raise
                logger.info("%s failed (attempt %d): %s: %s; retrying", what, tries, exc.code, exc.message)
                if not self.pause(tries, exc, deadline):
                    exc.details.setdefault("attempts", tries)
                    raise
                stale = True

    def call_leader(
        self,
        topic: str,
        partition: int,
        call: Callable[[str], T],
        *,
        deadline: float,
        safe_to_repeat: bool,
    ) -> T:
        """Run ``call(base_url)`` on the leader of a partition (any broker when the leader is unknown:
        it forwards), with retries until ``deadline``."""

        def attempt(view: ClusterView) -> T:
            base = view.leader_url(topic, partition)
            if base is None:
                return self.call_any(call, safe_to_repeat=safe_to_repeat)
            return call(base)

        return self.with_retries(
            f"request to {topic}-{partition}", attempt, deadline=deadline, safe_to_repeat=safe_to_repeat
        )
