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
import re
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Request

from topiclake import errors as e
from topiclake.api.errors import HTTPError
from topiclake.platform import Broker
from topiclake.platform.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

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


class ConsumerInstanceManager:
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

    # ------------------------------------------------------------------ background: heartbeats and expiry

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            now = time.monotonic()
            with self._lock:
                expired = [k for k, i in self._instances.items() if self._expired(i, now)]
                gone = [self._instances.pop(k) for k in expired]
                members = [i for i in self._instances.values() if i.member_id is not None]
            for inst in gone:
                self._safely(self._close, inst, "idle longer than consumer.instance.timeout.ms")
            for inst in members:
                if now - inst.last_heartbeat >= self.heartbeat_interval_s:
                    self._safely(self._heartbeat_if_free, inst)

    def _safely(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # the background thread must outlive any one instance's trouble
            logger.exception("consumer instance upkeep failed")

    def _heartbeat_if_free(self, inst: ConsumerInstance) -> None:
        if not inst.lock.acquire(blocking=False):
            return  # a request holds it and heartbeats itself
        try:
            if not inst.closed and inst.member_id is not None:
                self._sync(inst, poll=False)
        finally:
            inst.lock.release()

    # ------------------------------------------------------------------ membership

    def _join(self, inst: ConsumerInstance) -> None:
        try:
            joined = self.groups.join(
                inst.group,
                inst.member_id,
                topics=list(inst.topics) or None,
                pattern=inst.pattern.pattern if inst.pattern is not None else None,
                client_id=inst.name,
                session_timeout_ms=self.session_timeout_ms,
                max_poll_interval_ms=self.instance_timeout_ms,
                assignor=self.assignor,
            )
        except e.UnknownMemberId:
            inst.member_id = None
            self._join(inst)
            return
        inst.member_id = joined.member_id
        self._adopt(inst, joined.generation_id, joined.assignment)

    def _adopt(self, inst: ConsumerInstance, generation: int, assignment: list[TopicPartition]) -> None:
        inst.generation = generation
        inst.last_heartbeat = time.monotonic()
        new = sorted(assignment)
        if new != inst.assignment:
            logger.info(
                "consumer %s/%s: generation %d assigns %s", inst.group, inst.name, generation, _tps(new)
            )
            self._set_assignment(inst, new)

    def _sync(self, inst: ConsumerInstance, poll: bool) -> None:
        """Heartbeat (and tell the coordinator about a poll), adopting a new generation's assignment;
        join again when the coordinator no longer knows the member."""
        if inst.member_id is None:
            if inst.subscribed:
                self._join(inst)
            return
        try:
            if poll:
                self.groups.record_poll(inst.group, inst.member_id)
            beat = self.groups.heartbeat(inst.group, inst.member_id, inst.generation)
        except (e.UnknownMemberId, e.GroupNotFound) as exc:
            logger.info("consumer %s/%s joins again: %s", inst.group, inst.name, exc.message)
            inst.member_id = None
            self._join(inst)
            return
        except e.IllegalGeneration as exc:
            logger.info("consumer %s/%s joins again: %s", inst.group, inst.name, exc.message)
            self._join(inst)
            return
        self._adopt(inst, beat.generation_id, beat.assignment)

    def _auto_commit(self, inst: ConsumerInstance) -> None:
        """Commit consumed positions as the Java client's auto commit does: failures are logged, not raised
        (a partition that moved to another member is that member's to commit now)."""
        try:
            self._commit_positions(inst)
        except e.TopiclakeError as exc:
            logger.info("consumer %s/%s: auto commit skipped: %s", inst.group, inst.name, exc.message)

    def _leave(self, inst: ConsumerInstance) -> None:
        if inst.member_id is not None:
            try:
                self.groups.leave(inst.group, inst.member_id)
            except e.TopiclakeError as exc:
                logger.info("consumer %s/%s: leave: %s", inst.group, inst.name, exc.message)
        inst.member_id = None
        inst.generation = -1

    def _set_assignment(self, inst: ConsumerInstance, assignment: list[TopicPartition]) -> None:
        kept = set(assignment)
        inst.positions = {tp: o for tp, o in inst.positions.items() if tp in kept}
        inst.committed_positions = {tp: o for tp, o in inst.committed_positions.items() if tp in kept}
        inst.assignment = assignment

    # ------------------------------------------------------------------ subscribe / assign

    def subscribe(self, inst: ConsumerInstance, topics: list[str] | None, pattern: str | None) -> None:
        """Subscribe to topics or a pattern (replacing an earlier subscription) and join the group.

        Raises:
            HTTPError: 409 40903 when partitions were assigned by hand, or topics and a pattern are mixed
                (Kafka: "Subscription to topics, partitions and pattern are mutually exclusive").
        """
        with inst.lock:
            self._check(inst)
            if inst.manual and inst.assignment:
                raise illegal_state("Subscription to topics, partitions and pattern are mutually exclusive")
            if (topics is not None and inst.pattern is not None) or (pattern is not None and inst.topics):
                raise illegal_state("Subscription to topics, partitions and pattern are mutually exclusive")
            if not topics and pattern is None:
                self._unsubscribe(inst)
                return
            inst.manual = False
            inst.topics = sorted(set(topics or ()))
            inst.pattern = re.compile(pattern) if pattern is not None else None
            self._join(inst)

    def unsubscribe(self, inst: ConsumerInstance) -> None:
        """Drop the subscription and any manual assignment, leaving the group."""
        with inst.lock:
            self._check(inst)
            self._unsubscribe(inst)

    def _unsubscribe(self, inst: ConsumerInstance) -> None:
        if inst.config.auto_commit:
            self._auto_commit(inst)
        self._leave(inst)
        inst.topics = []
        inst.pattern = None
        inst.manual = False
        self._set_assignment(inst, [])

    def subscription(self, inst: ConsumerInstance) -> list[str]:
        """Subscribed topics (for a pattern: the existing topics it matches)."""
        with inst.lock:
            self._check(inst)
            if inst.pattern is not None:
                return sorted(t.name for t in self.broker.list_topics() if inst.pattern.fullmatch(t.name))
            return list(inst.topics)

    def assign(self, inst: ConsumerInstance, partitions: Sequence[TopicPartition]) -> None:
        """Assign partitions by hand (no group membership; an empty list unassigns).

        Raises:
            HTTPError: 409 40903 while subscribed.
            TopicNotFound, PartitionNotFound: for a partition that does not exist.
        """
        with inst.lock:
            self._check(inst)
            if inst.subscribed:
                raise illegal_state("Subscription to topics, partitions and pattern are mutually exclusive")
            for topic, p in partitions:
                self._check_partition(topic, p)
            inst.manual = bool(partitions)
            self._set_assignment(inst, sorted(set(partitions)))

    def assignment(self, inst: ConsumerInstance) -> list[TopicPartition]:
        """The partitions the instance reads (assigned by the coordinator or by hand)."""
        with inst.lock:
            self._check(inst)
            if inst.subscribed:
                self._sync(inst, poll=False)
            return list(inst.assignment)

    # ------------------------------------------------------------------ positions

    def seek(
        self, inst: ConsumerInstance, offsets: dict[TopicPartition, int], times: dict[TopicPartition, int]
    ) -> None:
        """Set positions to offsets, or to the first offset at or after a timestamp (ms); a timestamp after
        the last record seeks to the end.

        Raises:
            HTTPError: 409 40903 for a partition not assigned to the instance (as Kafka's ``seek``).
        """
        with inst.lock:
            self._check(inst)
            if inst.subscribed:
                self._sync(inst, poll=False)
            self._check_assigned(inst, [*offsets, *times])
            resolved = dict(offsets)
            for (topic, p), ts in times.items():
                found = self.broker.list_offsets(topic, p, ts)
                resolved[(topic, p)] = found if found is not None else self._end(topic, p)
            inst.positions.update(resolved)

    def seek_to(self, inst: ConsumerInstance, partitions: Sequence[TopicPartition], where: Reset) -> None:
        """Set positions to the beginning (``earliest``) or the end (``latest``) of partitions."""
        with inst.lock:
            self._check(inst)
            if inst.subscribed:
                self._sync(inst, poll=False)
            self._check_assigned(inst, partitions)
            for topic, p in partitions:
                inst.positions[(topic, p)] = self._reset_offset(topic, p, where)

    def _end(self, topic: str, partition: int) -> int:
        end = self.broker.list_offsets(topic, partition, "latest")
        return end if end is not None else 0

    def _reset_offset(self, topic: str, partition: int, where: Reset) -> int:
        found = self.broker.list_offsets(topic, partition, "earliest" if where == "earliest" else "latest")
        return found if found is not None else 0

    def _position(self, inst: ConsumerInstance, tp: TopicPartition) -> int:
        pos = inst.positions.get(tp)
        if pos is None:
            pos = self.groups.resolve_position(inst.group, tp[0], tp[1], inst.config.auto_offset_reset)
            inst.positions[tp] = pos
        return pos

    # ------------------------------------------------------------------ read

    def poll(self, inst: ConsumerInstance, timeout_ms: int | None, max_bytes: int | None) -> list[pa.Table]:
        """Records from the assigned partitions, as soon as there are any (or ``fetch.min.bytes`` of them),
        waiting up to ``timeout_ms`` otherwise. Positions move past what is returned.

        Returns:
            One table per partition read (the topic table's columns), in the order read.
        """
        timeout_s = (inst.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = time.monotonic() + max(0.0, timeout_s)
        budget = min(max_bytes or self.max_response_bytes, self.max_response_bytes)
        min_bytes = max(1, inst.config.fetch_min_bytes)
        out: list[pa.Table] = []
        records = nbytes = 0
        first = True
        while True:
            with inst.lock:
                self._check(inst)
                if first and inst.config.auto_commit:
                    self._auto_commit(inst)  # before fetching, as the Java client's poll()
                first = False
                self._sync(inst, poll=True)
                got, got_bytes = self._fetch_once(inst, self.max_poll_records - records, budget - nbytes)
                waiting = [(tp, self._position(inst, tp)) for tp in inst.assignment]
                inst.touch()
            out.extend(got)
            records += sum(t.num_rows for t in got)
            nbytes += got_bytes
            if records and (nbytes >= min_bytes or records >= self.max_poll_records or nbytes >= budget):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wait(waiting, min(remaining, _WAIT_SLICE_S if len(waiting) != 1 else 0.5))
        return out

    def _fetch_once(
        self, inst: ConsumerInstance, max_records: int, max_bytes: int
    ) -> tuple[list[pa.Table], int]:
        got: list[pa.Table] = []
        nbytes = 0
        n = len(inst.assignment)
        start = inst._next % n if n else 0
        inst._next += 1
        for i in range(n):
            if max_records <= 0 or (got and nbytes >= max_bytes):
                break
            tp = inst.assignment[(start + i) % n]
            topic, p = tp
            try:
                pos = self._position(inst, tp)
                if pos == self._end(topic, p):
                    continue
                try:
                    res = self.broker.fetch(topic, p, pos, max_records, max(1, max_bytes - nbytes))
                except e.OffsetOutOfRange:
                    if inst.config.auto_offset_reset == "none":
                        raise
                    pos = self._reset_offset(topic, p, inst.config.auto_offset_reset)
                    logger.info("consumer %s/%s: %s-%d reset to %d", inst.group, inst.name, topic, p, pos)
                    inst.positions[tp] = pos
                    continue
            except (e.TopicNotFound, e.PartitionNotFound):
                continue  # deleted under us; the next rebalance drops it
            batch = res.records
            if batch.num_rows:
                got.append(batch)
                nbytes += _payload_bytes(batch)
                max_records -= batch.num_rows
                inst.positions[tp] = res.next_offset
        return got, nbytes

    def _wait(self, waiting: list[tuple[TopicPartition, int]], slice_s: float) -> None:
        """Sleep until one partition may have new records or ``slice_s`` passed (rotating the partition
        waited on, so every partition is looked at within a few slices)."""
        if not waiting:
            time.sleep(slice_s)
            return
        (topic, p), pos = waiting[int(time.monotonic() / _WAIT_SLICE_S) % len(waiting)]
        try:
            self.broker.fetch(topic, p, pos, max_records=1, max_bytes=1, wait_ms=slice_s * 1000)
        except e.TopiclakeError:
            time.sleep(slice_s)

    # ------------------------------------------------------------------ offsets

    def commit(
        self, inst: ConsumerInstance, offsets: dict[TopicPartition, tuple[int, str | None]] | None
    ) -> None:
        """Commit offsets (already the next offset to read), or all consumed positions when None."""
        with inst.lock:
            self._check(inst)
            if inst.subscribed:
                self._sync(inst, poll=False)
            if offsets is None:
                self._commit_positions(inst)
                return
            for topic, p in offsets:
                self._check_partition(topic, p)
            if offsets:
                member = inst.member_id if inst.subscribed else None
                self.groups.commit(inst.group, member, inst.generation if member else -1, offsets)
                for tp, (offset, _) in offsets.items():
                    inst.committed_positions[tp] = offset

    def committed(
        self, inst: ConsumerInstance, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """The group's committed offsets (next offset to read, metadata) of those partitions that have one."""
        with inst.lock:
            self._check(inst)
        wanted = set(partitions)
        try:
            found = self.groups.committed(inst.group)
        except e.GroupNotFound:
            return {}
        return {tp: (c.offset, c.metadata) for tp, c in found.items() if tp in wanted}

    def _commit_positions(self, inst: ConsumerInstance) -> None:
        todo = {
            tp: (pos, None)
            for tp, pos in inst.positions.items()
            if tp in set(inst.assignment) and inst.committed_positions.get(tp) != pos
        }
        if not todo:
            return
        member = inst.member_id if inst.subscribed else None
        self.groups.commit(inst.group, member, inst.generation if member else -1, todo)
        inst.committed_positions.update({tp: pos for tp, (pos, _) in todo.items()})

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


def _payload_bytes(batch: pa.Table) -> int:
    """Approximate size of records as Confluent counts it: key plus value bytes."""
    total = 0
    for name in ("key", "value"):
        n = pc.sum(pc.binary_length(batch[name])).as_py()
        total += int(n or 0)
    return total


def _tps(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps) or "nothing"


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
