"""The consumer instances' model (configuration, state, Confluent's errors for them, the REST Proxy's
defaults), and the state of :class:`~topiclake.api.consumer_instances.ConsumerInstanceManager` that its
parts share.

Split from :mod:`.consumer_instances`, which re-exports the public names.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.api.errors import HTTPError
from topiclake.platform import Broker
from topiclake.platform.groups.group_coordinator import GroupCoordinator

TopicPartition = tuple[str, int]

Format = Literal["json", "binary", "avro", "jsonschema", "protobuf"]

Reset = Literal["earliest", "latest", "none"]

#: Confluent's ``consumer.instance.timeout.ms`` default.
DEFAULT_INSTANCE_TIMEOUT_MS = 300_000

#: Confluent's ``consumer.request.timeout.ms`` default: how long a read waits for records.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000

#: Confluent's ``consumer.request.max.bytes`` default: the most a read returns.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024

#: Kafka's ``max.poll.records`` default.
DEFAULT_MAX_POLL_RECORDS = 500

#: The Java consumer's ``session.timeout.ms`` and ``heartbeat.interval.ms`` defaults.
DEFAULT_SESSION_TIMEOUT_MS = 45_000

DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000

# Longest slice a waiting read sleeps on one partition before it looks at the others and the group again.
_WAIT_SLICE_S = 0.025


def instance_not_found(group: str, name: str) -> HTTPError:
    """Confluent's 404 40403 for an unknown (or expired, or deleted) consumer instance."""
    return HTTPError(
        404,
        40403,
        f"Consumer instance not found: no instance {name!r} in group {group!r} (it may have expired "
        "after consumer.instance.timeout.ms without requests, or been deleted)",
        code="consumer_instance_not_found",
    )


def illegal_state(message: str) -> HTTPError:
    """Confluent's 409 40903 for what the Java consumer refuses with an ``IllegalStateException``."""
    return HTTPError(409, 40903, f"Illegal state: {message}", code="illegal_state")


@dataclass(frozen=True)
class InstanceConfig:
    """What ``POST /consumers/{group}`` sets for one instance.

    Attributes:
        format: Embedded format of keys and values in reads: ``json`` or ``binary`` (base64).
        auto_offset_reset: Where to start without a valid committed offset: earliest, latest, none.
        auto_commit: Commit consumed positions before each read and when partitions are given up.
        fetch_min_bytes: A read waits (up to its timeout) for at least this many bytes once it has records.
        request_timeout_ms: How long a read waits for records when the request gives no ``timeout``.
    """

    format: Format = "binary"
    auto_offset_reset: Reset = "latest"
    auto_commit: bool = True
    fetch_min_bytes: int = 1
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS


@dataclass
class ConsumerInstance:
    """One consumer instance: its identity, configuration and consuming state (guarded by ``lock``)."""

    group: str
    name: str
    config: InstanceConfig
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    topics: list[str] = field(default_factory=list)
    pattern: re.Pattern[str] | None = None
    manual: bool = False
    member_id: str | None = None
    generation: int = -1
    assignment: list[TopicPartition] = field(default_factory=list)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    committed_positions: dict[TopicPartition, int] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    last_heartbeat: float = 0.0
    closed: bool = False
    _next: int = 0

    @property
    def subscribed(self) -> bool:
        """Whether the instance subscribed (by topics or pattern) rather than being assigned by hand."""
        return bool(self.topics) or self.pattern is not None

    def touch(self) -> None:
        """Push the idle deadline back (every request on the instance does)."""
        self.last_used = time.monotonic()


def _payload_bytes(batch: pa.Table) -> int:
    """Approximate size of records as Confluent counts it: key plus value bytes."""
    total = 0
    for name in ("key", "value"):
        n = pc.sum(pc.binary_length(batch[name])).as_py()
        total += int(n or 0)
    return total


def _tps(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps) or "nothing"


class ManagerBase:
    """The attributes every part uses (set by ``ConsumerInstanceManager.__init__``) and, for the type
    checker, the methods one part calls on another."""

    broker: Broker
    groups: GroupCoordinator
    instance_timeout_ms: int
    request_timeout_ms: int
    max_response_bytes: int
    max_poll_records: int
    session_timeout_ms: int
    assignor: str
    heartbeat_interval_s: float
    _instances: dict[tuple[str, str], ConsumerInstance]
    _lock: threading.Lock
    _stop: threading.Event
    _tick_s: float
    _thread: threading.Thread

    if TYPE_CHECKING:  # defined by the class or one of its parts

        def _auto_commit(self, inst: ConsumerInstance) -> None: ...

        def _check(self, inst: ConsumerInstance) -> None: ...

        def _check_assigned(self, inst: ConsumerInstance, partitions: Iterable[TopicPartition]) -> None: ...

        def _check_partition(self, topic: str, partition: int) -> None: ...

        def _close(self, inst: ConsumerInstance, why: str) -> None: ...

        def _commit_positions(self, inst: ConsumerInstance) -> None: ...

        def _expired(self, inst: ConsumerInstance, now: float) -> bool: ...

        def _sync(self, inst: ConsumerInstance, poll: bool) -> None: ...
