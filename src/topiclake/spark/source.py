"""The ``topiclake`` Spark source: reads topic partitions by offset range, like Spark's Kafka source.

The driver resolves offsets (:mod:`topiclake.spark._bounds`); executors read them
(:mod:`topiclake.spark._tasks`). A micro-batch is
``{topic: {partition: next offset}}`` JSON, as in Kafka, never a Delta version: its end is each
partition's high watermark, so compaction (files rewritten) and retention (files deleted) commits change
nothing about which records a batch holds, and a restarted query plans the same ranges again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from topiclake.errors import (
    InvalidRequest,
    TopiclakeError,
    TopicNotFound,
)
from topiclake.spark._bounds import current_partitions, rate_limit, resolve_bound
from topiclake.spark._options import (
    PartitionOffsets,
    ReaderOptions,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
)
from topiclake.spark._ranges import TopicSnapshot, Warehouse, check_start, report_data_loss
from topiclake.spark._schema import kafka_schema
from topiclake.spark._tasks import plan_ranges, read_range

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from topiclake.platform.groups.offsets_store import OffsetsStore

logger = logging.getLogger(__name__)

#: Metadata of the offsets a stream commits to its ``groupId``.
COMMIT_METADATA = "topiclake-spark-source"
#: A stream sees new topics and partitions within this many seconds.
CATALOG_MAX_AGE_S = 1.0


# ---------------------------------------------------------------------------------------------- readers


class TopiclakeBatchReader(DataSourceReader):
    """``spark.read.format("topiclake")``: offsets from ``startingOffsets`` to ``endingOffsets``.

    Args:
        options: The parsed options (``streaming=False``).
    """

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        """Resolve both ends per partition (in Spark's planner) and split them into tasks."""
        opts = self.options
        wh = Warehouse(opts)
        try:
            missing = [t for t in opts.subscription.named_topics() if not wh.catalog.exists(t)]
            if missing:
                raise TopicNotFound(
                    f"topic {missing[0]!r} does not exist in {wh.storage.root}", topic=missing[0]
                )
            snaps, tps = current_partitions(opts, wh)
            if opts.subscription.kind == "assign":
                absent = sorted(set(opts.subscription.assigned) - set(tps))
                if absent:
                    t, p = absent[0]
                    raise InvalidRequest(f"option 'assign': topic {t} has no partition {p}", option="assign")
            starts = resolve_bound(opts, opts.starting, wh, snaps, tps, is_start=True)
            ends = resolve_bound(opts, opts.ending, wh, snaps, tps, is_start=False)
            for (t, p), s in starts.items():
                if ends[(t, p)] < s:
                    raise InvalidRequest(
                        f"the starting offset {s} of {t}-{p} is after its ending offset {ends[(t, p)]}",
                        topic=t,
                        partition=p,
                    )
                starts[(t, p)] = check_start(opts.fail_on_data_loss, snaps[t], p, s, ends[(t, p)])
            ranges = plan_ranges(opts, snaps, starts, ends)
        finally:
            wh.close()
        logger.info(
            "topiclake batch read of %d partitions, %d offsets, in %d tasks",
            len(tps),
            sum(ends[tp] - starts[tp] for tp in tps),
            len(ranges),
        )
        return list(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one task's offset range (on an executor)."""
        return read_range(partition)


class _StreamState:
    """What the driver's stream reader remembers between calls (never pickled)."""

    def __init__(self, options: ReaderOptions) -> None:
        self.warehouse = Warehouse(options)
        self.target: PartitionOffsets | None = None  # Trigger.AvailableNow: read up to here, then stop
        self.latest: PartitionOffsets = {}
        self.last_batch_at = time.monotonic()
        self.store: OffsetsStore | None = None
        self.committed: PartitionOffsets = {}  # last offsets committed to the group

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        self.warehouse.close()


class TopiclakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("topiclake")``: micro-batches of offset ranges, exactly once.

    The offsets of a micro-batch (``{topic: {partition: next offset}}``) are what Spark checkpoints; a
    restarted query plans the same ranges again and reads the same records.

    Args:
        options: The parsed options (``streaming=True``).
    """

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self._state: _StreamState | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to its executors; the driver's state stays behind.
        return {"options": self.options, "_state": None}

    @property
    def state(self) -> _StreamState:
        """The driver state, made on first use (the reader is also built where it never plans)."""
        if self._state is None:
            self._state = _StreamState(self.options)
        return self._state

    def _now(self) -> tuple[dict[str, TopicSnapshot], list[TopicPartition]]:
        wh = self.state.warehouse
        wh.refresh_catalog(CATALOG_MAX_AGE_S)
        return current_partitions(self.options, wh)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Where a new query starts: ``startingOffsets`` (or a starting timestamp) resolved per partition."""
        snaps, tps = self._now()
        starts = resolve_bound(
            self.options, self.options.starting, self.state.warehouse, snaps, tps, is_start=True
        )
        logger.info("topiclake stream starts at %s", offsets_to_json(starts))
        return offsets_to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` (or ``minOffsetsPerTrigger``), else everything available."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of a ``Trigger.AvailableNow`` run: every partition's high watermark now."""
        snaps, tps = self._now()
        self.state.target = {(t, p): snaps[t].end(p) for t, p in tps}
        logger.info("topiclake stream (availableNow) reads up to %s", offsets_to_json(self.state.target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        """The end of the next micro-batch: high watermarks, bounded by the read limit."""
        state = self.state
        begin = offsets_from_json(start)
        self._commit_group(begin)
        snaps, tps = self._now()
        available: PartitionOffsets = {}
        starts: PartitionOffsets = {}
        backwards: PartitionOffsets = {}  # the topic was deleted and made again: its offsets restarted
        for tp in tps:
            snap = snaps[tp[0]]
            s = begin[tp] if tp in begin else snap.log_start(tp[1])
            end = hwm = snap.end(tp[1])
            if hwm < s:
                backwards[tp] = hwm
            if state.target is not None:
                end = min(end, state.target.get(tp, s))
            starts[tp] = s
            available[tp] = max(s, end)
        state.latest = {tp: snaps[tp[0]].end(tp[1]) for tp in tps}
        ends = dict(available)
        if not isinstance(limit, ReadAllAvailable):
            new = sum(available[tp] - starts[tp] for tp in tps)
            minimum = self.options.min_offsets_per_trigger
            if minimum is not None and state.target is None and 0 < new < minimum:
                waited_ms = (time.monotonic() - state.last_batch_at) * 1000
                if waited_ms < self.options.max_trigger_delay_ms:
                    return offsets_to_json(begin)
            maximum = (
                limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
            )
            if maximum is not None:
                ends = rate_limit(maximum, starts, available)
        ends.update(backwards)  # reported as data loss when the batch is planned
        if ends != {tp: begin.get(tp) for tp in ends}:
            state.last_batch_at = time.monotonic()
        return offsets_to_json(ends)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        """The high watermarks seen by the last :meth:`latestOffset` (Spark shows them in progress)."""
        return offsets_to_json(self.state.latest) if self.state.latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Tasks for the offsets ``[start, end)`` of one micro-batch (also when a restart replays it)."""
        opts = self.options
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        wh = self.state.warehouse
        wh.refresh_catalog(CATALOG_MAX_AGE_S)
        infos = wh.topics(sorted({t for t, _ in finish}))
        snaps = {name: wh.snapshot(info) for name, info in infos.items()}
        gone = sorted(set(begin) - set(finish)) + sorted(tp for tp in finish if tp[0] not in snaps)
        for t, p in gone:  # Kafka: "partitions are gone, some data may have been missed"
            at = begin.get((t, p), 0)
            why = "deleted with their topic"
            report_data_loss(
                opts.fail_on_data_loss, t, p, at, at, why, then="the partition is no longer read"
            )
        starts: PartitionOffsets = {}
        ends: PartitionOffsets = {}
        for (t, p), e in finish.items():
            if t not in snaps:
                continue
            s = begin[(t, p)] if (t, p) in begin else snaps[t].log_start(p)
            if e < s:  # the topic was deleted and made again: its offsets restarted below ours
                why = (
                    f"written to a new topic of the same name (its end {e} is below this query's offset {s})"
                )
                report_data_loss(opts.fail_on_data_loss, t, p, 0, e, why)
                continue
            starts[(t, p)] = check_start(opts.fail_on_data_loss, snaps[t], p, s, e)
            ends[(t, p)] = e
        ranges = plan_ranges(opts, snaps, starts, ends)
        logger.info(
            "topiclake micro-batch %s -> %s: %d offsets in %d tasks",
            start,
            end,
            sum(ends[tp] - starts[tp] for tp in ends),
            len(ranges),
        )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one task's offset range (on an executor)."""
        return read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished the micro-batch ending at ``end``: commit it to ``groupId`` if one is set."""
        self._commit_group(offsets_from_json(end))

    def _commit_group(self, offsets: PartitionOffsets) -> None:
        """Commit processed offsets to ``groupId`` (for lag; the checkpoint is what the query resumes from).

        Spark calls :meth:`commit` for a batch only when it starts the next one, so a run that ends
        (``availableNow``) would leave its last batch out; :meth:`latestOffset` is only ever asked after
        the previous batch completed, so its ``start`` is committed too.
        """
        group = self.options.group_id
        state = self.state
        if group is None or not offsets or offsets == state.committed:
            return
        try:
            if state.store is None:
                from topiclake.platform.groups.offsets_store import OffsetsStore

                state.store = OffsetsStore(state.warehouse.storage, linger_ms=0)
            state.store.commit(group, {tp: (o, COMMIT_METADATA) for tp, o in offsets.items()})
        except TopiclakeError as exc:  # progress is in the checkpoint; the group's copy is for lag only
            logger.warning("topiclake stream: cannot commit offsets of group %s: %s", group, exc)
            return
        state.committed = dict(offsets)
        logger.info("topiclake stream committed %d offsets to group %s", len(offsets), group)

    def stop(self) -> None:
        """Release the driver state (offsets store, table handles)."""
        if self._state is not None:
            self._state.close()
            self._state = None


def check_user_schema(schema: StructType, include_headers: bool) -> None:
    """Refuse a user-given schema: the source's schema is Kafka's, fixed.

    Raises:
        InvalidRequest: ``schema`` is not the source's schema.
    """
    if schema != kafka_schema(include_headers):
        raise InvalidRequest(
            "the topiclake source has a fixed schema (Spark's Kafka source schema) and cannot be given one "
            "with .schema(...); use includeHeaders=true for the headers column"
        )
