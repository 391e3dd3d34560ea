"""Records as plain Python lists: the small-request path, with no Arrow work per request.

A request of a few records costs more in fixed Arrow overhead (building a table, a dozen compute kernels)
than in data. :class:`Rows` carries such a request's columns as the lists the HTTP layer parsed them into;
the partition log queues them as they are, and :func:`topic_table` builds ONE Arrow table for everything a
flush commits, whatever number of requests it gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from topiclake.errors import InvalidRecord, PartitionNotFound, RecordTooLarge, TopiclakeError
from topiclake.platform.records import INPUT_SCHEMA
from topiclake.schemas import CREATE_TIME, HEADERS_TYPE, LOG_APPEND_TIME, TOPIC_SCHEMA

#: Headers of one record: ``[{"key": str, "value": bytes | None}]`` or None.
Headers = list[dict[str, Any]] | None


def _headers(headers: list[Headers]) -> pa.Array:
    return pa.array(headers, HEADERS_TYPE) if any(headers) else pa.nulls(len(headers), HEADERS_TYPE)


@dataclass(slots=True)
class Rows:
    """Input columns of a few records, as lists of equal length."""

    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]
    timestamps: list[int | None]

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, indices: Sequence[int]) -> Rows:
        """The rows at ``indices``, in that order."""
        n = len(indices)
        if n > 1 and self.plain():  # no headers, no CreateTimes: an itemgetter per column (a C loop)
            pick = itemgetter(*indices)
            return Rows(list(pick(self.keys)), list(pick(self.values)), [None] * n, [None] * n)
        return Rows(
            [self.keys[i] for i in indices],
            [self.values[i] for i in indices],
            [self.headers[i] for i in indices],
            [self.timestamps[i] for i in indices],
        )

    def plain(self) -> bool:
        """Whether no record has headers or a CreateTime (the common case, served by C-speed loops)."""
        n = len(self.keys)
        return self.headers.count(None) == n and self.timestamps.count(None) == n

    def nbytes(self) -> int:
        """Bytes of keys, values and headers (what the memory budget counts)."""
        if self.headers.count(None) == len(self.headers):
            return _total(self.keys) + _total(self.values) + 16 * len(self.keys)
        n = 0
        for k, v, h in zip(self.keys, self.values, self.headers, strict=True):
            n += len(k or b"") + len(v or b"") + 16
            if h:
                n += sum(len(x["key"]) + len(x["value"] or b"") for x in h)
        return n

    def to_table(self) -> pa.Table:
        """The same records as input columns (:data:`~topiclake.platform.records.INPUT_SCHEMA`)."""
        return pa.Table.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, HEADERS_TYPE)
                if any(self.headers)
                else pa.nulls(len(self), HEADERS_TYPE),
                pa.array(self.timestamps, pa.int64()),
            ],
            schema=INPUT_SCHEMA,
        )


def check(
    rows: Rows, explicit: Sequence[int | None], topic: str, limit: int, n_parts: int
) -> dict[int, TopiclakeError]:
    """Per-record errors (unknown partition, negative timestamp, over ``max.message.bytes``), by row."""
    errors: dict[int, TopiclakeError] = {}
    # the common case in C-speed loops: no record can fail unless the largest key + value is too large
    if (
        explicit.count(None) == len(explicit)
        and rows.plain()
        and _longest(rows.keys) + _longest(rows.values) <= limit
    ):
        return errors
    for i, (k, v, h, ts) in enumerate(
        zip(rows.keys, rows.values, rows.headers, rows.timestamps, strict=True)
    ):
        p = explicit[i]
        if p is not None and not 0 <= p < n_parts:
            errors[i] = PartitionNotFound(
                f"topic {topic} has no partition {p} (it has {n_parts})", topic=topic, partition=p
            )
            continue
        if ts is not None and ts < 0:
            errors[i] = InvalidRecord(f"timestamp {ts} is negative", topic=topic)
            continue
        size = len(k or b"") + len(v or b"")
        if h:
            size += sum(len(x["key"].encode()) + len(x["value"] or b"") for x in h)
        if size > limit:
            errors[i] = RecordTooLarge(
                f"record of {size} bytes is larger than max.message.bytes={limit} of topic {topic}",
                topic=topic,
                size=size,
            )
    return errors


def _total(column: list[bytes | None]) -> int:
    return sum(map(len, filter(None, column)))


def _longest(column: list[bytes | None]) -> int:
    return max(map(len, filter(None, column)), default=0)


@dataclass(slots=True)
class LazyBatch:
    """One partition's share of a request, queued as lists; its table is built at flush time."""

    rows: Rows
    segment: int
    now: int
    log_append_time: bool
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None


def topic_table(topic: str, batches: Sequence[tuple[int, int, LazyBatch]]) -> pa.Table:
    """One topic-table (:data:`~topiclake.schemas.TOPIC_SCHEMA`) for many (partition, base offset, batch).

    Columns that are one value per batch (topic, partition, segment, timestamp type, producer) are built
    as runs, and offsets as ranges, by Arrow and numpy: a list of one Python object per record cost more
    than the keys and values for a flush of small requests.
    """
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Headers] = []
    counts: list[int] = []
    explicit = False  # some record carries its own CreateTime
    for _, _, b in batches:
        r = b.rows
        keys += r.keys
        values += r.values
        headers += r.headers
        counts.append(len(r))
        explicit = explicit or (not b.log_append_time and r.timestamps.count(None) != len(r))
    total = len(keys)
    if explicit:
        stamps: list[int] = []
        for _, _, b in batches:
            now, r = b.now, b.rows
            stamps += (
                [b.now] * len(r) if b.log_append_time else [now if t is None else t for t in r.timestamps]
            )
        millis = pa.array(stamps, pa.int64())
    else:
        millis = _runs([b.now for _, _, b in batches], counts, pa.int64())
    micros = pc.multiply_checked(millis, 1000).cast(pa.timestamp("us", tz="UTC"))
    kinds = [LOG_APPEND_TIME if b.log_append_time else CREATE_TIME for _, _, b in batches]
    if all(b.base_sequence is None for _, _, b in batches):
        seqs: pa.Array = pa.nulls(total, pa.int32())
    else:
        listed: list[int | None] = []
        for _, _, b in batches:
            n = len(b.rows)
            listed += [None] * n if b.base_sequence is None else range(b.base_sequence, b.base_sequence + n)
        seqs = pa.array(listed, pa.int32())
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), total),
            _runs([p for p, _, _ in batches], counts, pa.int32()),
            _offsets([base for _, base, _ in batches], counts),
            micros,
            _runs(kinds, counts, pa.int32()),
            _headers(headers),
            _runs([b.segment for _, _, b in batches], counts, pa.int64()),
            _runs([b.producer_id for _, _, b in batches], counts, pa.int64()),
            _runs([b.producer_epoch for _, _, b in batches], counts, pa.int32()),
            seqs,
        ],
        schema=TOPIC_SCHEMA,
    )


def _runs(per_batch: list[Any], counts: list[int], type_: pa.DataType) -> pa.Array:
    """Each batch's value repeated over its records."""
    first = per_batch[0] if per_batch else None
    total = sum(counts)
    if per_batch.count(first) == len(per_batch):
        return pa.nulls(total, type_) if first is None else pa.repeat(pa.scalar(first, type_), total)
    if None in per_batch:
        return pa.array([v for v, n in zip(per_batch, counts, strict=True) for _ in range(n)], type_)
    return pa.array(np.repeat(np.array(per_batch, dtype=np.int64), counts), type_)


def _offsets(bases: list[int], counts: list[int]) -> pa.Array:
    """Each batch's offsets, ``base`` on, one after another."""
    if len(bases) == 1:
        return pa.array(np.arange(bases[0], bases[0] + counts[0], dtype=np.int64))
    starts = np.cumsum([0, *counts[:-1]], dtype=np.int64)
    shift = np.repeat(np.array(bases, dtype=np.int64) - starts, counts)
    return pa.array(np.arange(len(shift), dtype=np.int64) + shift)
