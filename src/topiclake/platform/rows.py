"""Records as plain Python lists: the small-request path, with no Arrow work per request.

A request of a few records costs more in fixed Arrow overhead (building a table, a dozen compute kernels)
than in data. :class:`Rows` carries such a request's columns as the lists the HTTP layer parsed them into;
the partition log queues them as they are, and :func:`topic_table` builds ONE Arrow table for everything a
flush commits, whatever number of requests it gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    """One topic-table (:data:`~topiclake.schemas.TOPIC_SCHEMA`) for many (partition, base offset, batch)."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Headers] = []
    stamps: list[int] = []
    types: list[int] = []
    parts: list[int] = []
    offsets: list[int] = []
    segments: list[int] = []
    pids: list[int | None] = []
    epochs: list[int | None] = []
    seqs: list[int | None] = []
    for partition, base, b in batches:
        r = b.rows
        n = len(r)
        keys += r.keys
        values += r.values
        headers += r.headers
        if b.log_append_time:
            stamps += [b.now] * n
            types += [LOG_APPEND_TIME] * n
        else:
            now = b.now
            if r.timestamps.count(None) == n:
                stamps += [now] * n
            else:
                stamps += [now if ts is None else ts for ts in r.timestamps]
            types += [CREATE_TIME] * n
        parts += [partition] * n
        offsets += range(base, base + n)
        segments += [b.segment] * n
        pids += [b.producer_id] * n
        epochs += [b.producer_epoch] * n
        seqs += [None] * n if b.base_sequence is None else range(b.base_sequence, b.base_sequence + n)
    total = len(keys)
    micros = pc.multiply_checked(pa.array(stamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * total, pa.string()),
            pa.array(parts, pa.int32()),
            pa.array(offsets, pa.int64()),
            micros,
            pa.array(types, pa.int32()),
            _headers(headers),
            pa.array(segments, pa.int64()),
            pa.array(pids, pa.int64()),
            pa.array(epochs, pa.int32()),
            pa.array(seqs, pa.int32()),
        ],
        schema=TOPIC_SCHEMA,
    )
