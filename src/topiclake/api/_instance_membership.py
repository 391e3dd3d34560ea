"""How the consumer instance manager plays the Java client towards the group coordinator: the background
heartbeats, joins, syncs, auto-commits and leaves, and subscribe / assign. Split from
:mod:`.consumer_instances` (its docstring tells the whole story).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import Any

from topiclake import errors as e
from topiclake.api._instance_base import ConsumerInstance, ManagerBase, TopicPartition, _tps, illegal_state

logger = logging.getLogger("topiclake.api.consumer_instances")  # one logger for all parts


class InstanceMembership(ManagerBase):
    """Group membership of the consumer instances."""

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
