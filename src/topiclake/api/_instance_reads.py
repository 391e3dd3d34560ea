"""What a consumer instance reads and commits: positions (seek), polls (with waiting) and offsets.

Split from :mod:`.consumer_instances`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

import pyarrow as pa

from topiclake import errors as e
from topiclake.api._instance_base import (
    _WAIT_SLICE_S,
    ConsumerInstance,
    ManagerBase,
    Reset,
    TopicPartition,
    _payload_bytes,
)

logger = logging.getLogger("topiclake.api.consumer_instances")  # one logger for all parts


class InstanceReads(ManagerBase):
    """Positions, reads and commits of the consumer instances."""

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
