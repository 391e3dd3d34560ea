"""A topic log's answers to a failed or fenced commit: refresh, move uncommitted records behind another
writer's, give up partitions a newer leader has, fail what cannot be written. Split from :mod:`._commit`.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from topiclake.errors import NotLeader, TopiclakeError
from topiclake.platform.log._base import FOREIGN_ERRORS, epoch_app_id, partition_app_id
from topiclake.platform.log._local import LogLocal
from topiclake.platform.storage.delta_state import read_txn

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log


class LogFencing(LogLocal):
    """Recovery steps of the flusher (:class:`._commit.LogCommits`) after a commit did not land."""

    def _refresh_after_failure(self) -> bool:
        try:
            self._dt.update_incremental()
            return True
        except FOREIGN_ERRORS as exc:
            logger.warning("topic %s: cannot refresh table after failed commit: %s", self.topic, exc)
            return False

    def _rebase_if_fenced(self, committed: dict[int, int] | None = None) -> bool:
        # Every partition, not just those of the failed batch: the refreshed snapshot may hold another
        # writer's commit to a partition we are about to write next, and a commit from a snapshot that
        # already contains it would not be rejected.
        foreign = {}
        led = self._led
        for p, part in list(self._parts.items()):
            tv = read_txn(self._dt, partition_app_id(self.topic, p)) or 0
            if tv <= max(part.high_watermark, (committed or {}).get(p, 0)):
                continue
            if led is not None and p not in led:  # another broker leads it: just follow its end
                with part.cond:
                    part.high_watermark = max(part.high_watermark, tv)
                part.next_offset = max(part.next_offset, tv)
                continue
            foreign[p] = tv
        if not foreign:
            return False
        self.fences += 1
        deposed = []
        if led is not None:
            for p in foreign:
                epoch = read_txn(self._dt, epoch_app_id(self.topic, p)) or 0
                if epoch > led.get(p, -1):
                    deposed.append(p)
        with self._lock:
            for p in deposed:  # a newer leader has committed: stop writing this partition
                logger.error(
                    "topic %s partition %d: fenced by a leader with epoch %d (ours %d): giving it up",
                    self.topic,
                    p,
                    read_txn(self._dt, epoch_app_id(self.topic, p)) or 0,
                    (self._led or {}).get(p, -1),
                )
                if self._led is not None:
                    self._led.pop(p, None)
            for p, tv in foreign.items():
                part = self._parts[p]
                base = tv
                if p not in deposed:
                    logger.warning(
                        "topic %s partition %d: fenced by another writer at offset %d (ours %d); "
                        "moving uncommitted records behind it",
                        self.topic,
                        p,
                        tv,
                        part.high_watermark,
                    )
                for pend in [*self._inflight, *self._queue]:
                    if pend.partition != p:
                        continue
                    n = pend.count
                    if pend.table is not None:  # a lazy batch takes its offsets from base_offset
                        offsets = pa.arange(base, base + n).cast(pa.int64())
                        pend.table = pend.table.set_column(4, "offset", offsets)
                    pend.base_offset = base
                    base += n
                part.next_offset = base
                part.tail.clear()
                with part.cond:
                    part.high_watermark = tv
                part.wake()  # another writer's records are there to read
                if part.segment_base > tv:
                    part.segment_base = tv
        if deposed:
            self._fail_partitions(set(deposed))
        return True

    def _fail_partitions(self, partitions: set[int], error: TopiclakeError | None = None) -> None:
        """Fail the uncommitted records of partitions this broker no longer leads (NotLeader unless
        ``error`` says otherwise)."""
        with self._lock:
            failed = [pend for pend in [*self._inflight, *self._queue] if pend.partition in partitions]
            self._inflight = [pend for pend in self._inflight if pend.partition not in partitions]
            queued = [pend for pend in self._queue if pend.partition in partitions]
            self._queue = [pend for pend in self._queue if pend.partition not in partitions]
            self._queued_records -= sum(pend.count for pend in queued)
            self._queued_bytes -= sum(pend.nbytes for pend in queued)
        self._budget.release(sum(pend.nbytes for pend in queued))
        for pend in failed:
            pend.handle.settle(
                error
                or NotLeader(
                    f"{self.topic}-{pend.partition} has a newer leader; retry there",
                    topic=self.topic,
                    partition=pend.partition,
                )
            )

    def _fail_all(self, error: TopiclakeError) -> None:
        with self._lock:
            failed = [*self._inflight, *self._queue]
            queued_bytes = sum(p.nbytes for p in self._queue)
            self._inflight = []
            self._queue = []
            self._queued_records = 0
            self._queued_bytes = 0
            logger.error(
                "topic %s: %d batches failed (%s); resetting partitions from the table",
                self.topic,
                len(failed),
                error.message,
            )
            try:
                self._refresh_snapshot()
                self._takeover_reader = None
                self._producers.forget_all()
                index = self._refresh_index(force=True)
                for p in list(self._parts):
                    self._parts[p] = self._recover_partition(p, index)
            except Exception as exc:  # keep serving: next flush will try again
                logger.error("topic %s: reset failed: %s", self.topic, exc)
        self._budget.release(queued_bytes)
        for pend in failed:
            pend.handle.settle(error)
