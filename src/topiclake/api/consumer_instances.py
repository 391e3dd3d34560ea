"""Consumer instances of the Kafka REST Proxy v2 API, held by the gateway on behalf of HTTP clients.

A consumer instance is what a Java ``KafkaConsumer`` is inside Confluent's REST Proxy: it belongs to a
group, is created by ``POST /consumers/{group}``, subscribes (and then is a member of the group, with
partitions assigned by the coordinator) or is assigned partitions by hand, keeps a position per partition,
polls, and commits. The manager plays the Java client's part towards the group coordinator: it joins on
subscribe, heartbeats for every member from one background thread (as the Java client's heartbeat thread
does) and on every request, adopts the assignment of each new generation, joins again when the coordinator
forgot the member, commits consumed positions before each poll and before leaving when
``auto.commit.enable`` is on, and leaves the group when an instance is deleted or has been idle longer than
``consumer.instance.timeout.ms`` (a bounded reaper: one thread, one pass a tick, plus lazy expiry on
lookup).

Positions are Kafka's: the next offset to read. A poll returns records and moves positions past them, so a
commit without offsets commits what the client has been given, as ``commitSync()`` does.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable

from fastapi import Request

from topiclake import errors as e
from topiclake.api._instance_base import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_INSTANCE_TIMEOUT_MS,
    DEFAULT_MAX_POLL_RECORDS,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_REQUEST_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    ConsumerInstance,
    Format,
    InstanceConfig,
    Reset,
    TopicPartition,
    illegal_state,
    instance_not_found,
)
from topiclake.api._instance_membership import InstanceMembership
from topiclake.api._instance_reads import InstanceReads
from topiclake.api.errors import HTTPError
from topiclake.platform import Broker
from topiclake.platform.groups.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_INSTANCE_TIMEOUT_MS",
    "DEFAULT_MAX_POLL_RECORDS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "ConsumerInstance",
    "ConsumerInstanceManager",
    "Format",
    "InstanceConfig",
    "Reset",
    "TopicPartition",
    "get_groups",
    "get_manager",
    "illegal_state",
    "instance_not_found",
]


class ConsumerInstanceManager(InstanceMembership, InstanceReads):
    """The consumer instances of one gateway, and their membership in groups.

    Args:
        broker: The broker records are read from.
        groups: The group coordinator (joins, heartbeats, commits, committed offsets).
        instance_timeout_ms: ``consumer.instance.timeout.ms``: an instance without requests this long is
            removed and leaves its group. It is also the members' ``max.poll.interval.ms``.
        request_timeout_ms: Default ``consumer.request.timeout.ms`` of new instances.
        max_response_bytes: ``consumer.request.max.bytes``: the most one read returns.
        max_poll_records: The most records one read returns.
        session_timeout_ms: ``session.timeout.ms`` of the members.
        heartbeat_interval_ms: How often the background thread heartbeats for every member.
        assignor: The group assignor members ask for (Kafka's default: range).
    """

    def __init__(
        self,
        broker: Broker,
        groups: GroupCoordinator,
        *,
        instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_poll_records: int = DEFAULT_MAX_POLL_RECORDS,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        assignor: str = "range",
    ) -> None:
        if instance_timeout_ms < 1 or heartbeat_interval_ms < 1:
            raise ValueError("instance_timeout_ms and heartbeat_interval_ms must be positive")
        self.broker = broker
        self.groups = groups
        self.instance_timeout_ms = instance_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_response_bytes = max_response_bytes
        self.max_poll_records = max_poll_records
        self.session_timeout_ms = session_timeout_ms
        self.assignor = assignor
        self.heartbeat_interval_s = min(heartbeat_interval_ms, session_timeout_ms // 3 or 1) / 1000
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        tick = min(1.0, instance_timeout_ms / 4000, self.heartbeat_interval_s)
        self._tick_s = max(0.01, tick)
        self._thread = threading.Thread(target=self._run, name="consumer-instances", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ lifecycle of instances

    def create(self, group: str, name: str | None, config: InstanceConfig) -> ConsumerInstance:
        """Create an instance (a random ``rest-consumer-<uuid>`` name when none is given).

        Raises:
            HTTPError: 409 40902 when the group already has an instance of that name.
        """
        name = name or f"rest-consumer-{uuid.uuid4()}"
        inst = ConsumerInstance(group, name, config)
        with self._lock:
            if (group, name) in self._instances:
                raise HTTPError(
                    409,
                    40902,
                    f"Consumer with specified consumer ID already exists in the specified consumer group: "
                    f"{name!r} in {group!r}",
                    code="consumer_exists",
                )
            self._instances[(group, name)] = inst
        logger.info("consumer instance %s created in group %s (%s)", name, group, config.format)
        return inst

    def get(self, group: str, name: str) -> ConsumerInstance:
        """The live instance, its idle deadline pushed back (404 40403 if unknown or expired)."""
        with self._lock:
            inst = self._instances.get((group, name))
            if inst is not None and self._expired(inst, time.monotonic()):
                del self._instances[(group, name)]
                expired = inst
                inst = None
            else:
                expired = None
            if inst is not None:
                inst.touch()
        if expired is not None:
            self._close(expired, "expired")
        if inst is None:
            raise instance_not_found(group, name)
        return inst

    def delete(self, group: str, name: str) -> None:
        """Remove an instance: commit if auto commit is on, leave the group (404 40403 if unknown)."""
        with self._lock:
            inst = self._instances.pop((group, name), None)
        if inst is None:
            raise instance_not_found(group, name)
        self._close(inst, "deleted")

    def instances(self, group: str | None = None) -> list[ConsumerInstance]:
        """The live instances (of one group)."""
        with self._lock:
            return [i for (g, _), i in self._instances.items() if group is None or g == group]

    def close(self) -> None:
        """Stop the background thread and close every instance (they leave their groups)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        with self._lock:
            instances = list(self._instances.values())
            self._instances.clear()
        for inst in instances:
            self._close(inst, "gateway stopping")

    def _expired(self, inst: ConsumerInstance, now: float) -> bool:
        return (now - inst.last_used) * 1000 >= self.instance_timeout_ms

    def _close(self, inst: ConsumerInstance, why: str) -> None:
        with inst.lock:
            if inst.closed:
                return
            if inst.config.auto_commit:
                self._auto_commit(inst)  # KafkaConsumer.close() commits when auto commit is on
            self._leave(inst)
            inst.closed = True
            inst.positions.clear()
        logger.info("consumer instance %s of group %s removed (%s)", inst.name, inst.group, why)

    # ------------------------------------------------------------------ checks

    def _check(self, inst: ConsumerInstance) -> None:
        if inst.closed:
            raise instance_not_found(inst.group, inst.name)
        inst.touch()

    def _check_partition(self, topic: str, partition: int) -> None:
        info = self.broker.describe_topic(topic)
        if not 0 <= partition < info.partitions:
            raise e.PartitionNotFound(
                f"Partition not found: topic {topic!r} has no partition {partition} "
                f"(it has {info.partitions})",
                topic=topic,
                partition=partition,
            )

    def _check_assigned(self, inst: ConsumerInstance, partitions: Iterable[TopicPartition]) -> None:
        owned = set(inst.assignment)
        for topic, p in partitions:
            if (topic, p) not in owned:
                raise illegal_state(f"No current assignment for partition {topic}-{p}")


# ---------------------------------------------------------------------------------------------- wiring


def get_groups(request: Request) -> GroupCoordinator:
    """The gateway's group coordinator (made with the broker; ``app.state.groups`` may override it)."""
    groups: GroupCoordinator | None = getattr(request.app.state, "groups", None)
    return groups if groups is not None else request.app.state.broker.groups


async def get_manager(request: Request) -> ConsumerInstanceManager:
    """The gateway's consumer instances, made in the app's lifespan."""
    manager: ConsumerInstanceManager | None = getattr(request.app.state, "consumer_instances", None)
    if manager is None:
        raise HTTPError(
            503, 50003, "consumer instances are not available on this gateway", code="unavailable"
        )
    return manager
