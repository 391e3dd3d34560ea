"""The message browser's reads: a partition (or all) from an offset, a timestamp or the end, filtered by key.

Reads go through :meth:`Broker.fetch` (committed records only, the tail from memory), bounded: at most
``limit`` records shown and ``SCAN_LIMIT`` records read per partition when filtering by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.console.render import ShownRecord, show
from topiclake.platform import Broker

From = Literal["offset", "timestamp", "end"]
SCAN_LIMIT = 10_000
_BATCH = 500


@dataclass
class Page:
    """Records to show, oldest first, and where each partition's next read starts (for the live tail)."""

    records: list[ShownRecord]
    positions: dict[int, int]
    scanned: int = 0
    ends: dict[int, tuple[int, int]] = field(default_factory=dict)


def _rows(batch: pa.Table, partition: int, fmt: str, topic: str) -> list[ShownRecord]:
    cols = batch.select(["offset", "key", "value", "headers"]).to_pydict()
    stamps = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
    out = []
    for i in range(batch.num_rows):
        key, value = cols["key"][i], cols["value"][i]
        key_text, key_how = show(key, fmt, topic, is_key=True)
        value_text, value_how = show(value, fmt, topic)
        headers = [(h["key"], show(h["value"], "text")[0]) for h in cols["headers"][i] or ()]
        size = len(key or b"") + len(value or b"")
        out.append(
            ShownRecord(
                partition,
                cols["offset"][i],
                stamps[i],
                key_text,
                key_how,
                value_text,
                value_how,
                headers,
                size,
            )
        )
    return out


def _matches(batch: pa.Table, key_filter: str) -> pa.Table:
    keys = pc.cast(batch["key"], pa.binary()).to_pylist()
    needle = key_filter.encode()
    keep = [k is not None and needle in k for k in keys]
    return batch.filter(pa.array(keep, pa.bool_()))


def read_partition(
    broker: Broker, topic: str, partition: int, offset: int, limit: int, key_filter: str = ""
) -> tuple[pa.Table, int, int]:
    """Up to ``limit`` records from ``offset`` on (matching ``key_filter`` if given): the records, the
    next offset to read, and how many records were read."""
    start = broker.list_offsets(topic, partition, "earliest") or 0
    end = broker.list_offsets(topic, partition, "latest") or 0
    position = min(max(offset, start), end)
    found: list[pa.Table] = []
    shown = scanned = 0
    while position < end and shown < limit and scanned < SCAN_LIMIT:
        want = limit - shown if not key_filter else _BATCH
        result = broker.fetch(topic, partition, position, max_records=want)
        batch = result.records
        if batch.num_rows == 0:
            position = max(position, result.next_offset)
            break
        scanned += batch.num_rows
        position = result.next_offset
        if key_filter:
            batch = _matches(batch, key_filter)
            batch = batch.slice(0, limit - shown)
        shown += batch.num_rows
        found.append(batch)
    if key_filter and found:  # a slice may stop short of the batch: continue after its last record
        last = found[-1]
        if shown >= limit and last.num_rows:
            position = int(last["offset"][-1].as_py()) + 1
    table = pa.concat_tables(found) if found else None
    return (table if table is not None else pa.table({})), position, scanned


def browse(
    broker: Broker,
    topic: str,
    partitions: list[int],
    start_from: From,
    offset: int = 0,
    timestamp_ms: int | None = None,
    limit: int = 50,
    fmt: str = "text",
    key_filter: str = "",
) -> Page:
    """The records a browser page shows: from ``offset``, ``timestamp_ms`` or the last ``limit``."""
    records: list[ShownRecord] = []
    positions: dict[int, int] = {}
    ends: dict[int, tuple[int, int]] = {}
    scanned = 0
    for p in partitions:
        lo = broker.list_offsets(topic, p, "earliest") or 0
        hi = broker.list_offsets(topic, p, "latest") or 0
        ends[p] = (lo, hi)
        if start_from == "end":
            first = max(lo, hi - (SCAN_LIMIT if key_filter else limit))
        elif start_from == "timestamp":
            found = broker.list_offsets(topic, p, timestamp_ms or 0)
            first = hi if found is None else found
        else:
            first = offset
        batch, positions[p], n = read_partition(broker, topic, p, first, limit, key_filter)
        scanned += n
        if batch.num_rows:
            records.extend(_rows(batch, p, fmt, topic))
    if start_from == "end":
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        records = records[-limit:]
        if not key_filter:
            positions = {p: ends[p][1] for p in partitions}
    else:
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        records = records[:limit]
    return Page(records, positions, scanned, ends)


def tail(
    broker: Broker, topic: str, positions: dict[int, int], fmt: str, key_filter: str = "", limit: int = 200
) -> Page:
    """Records committed since ``positions`` (the live tail's poll), oldest first."""
    records: list[ShownRecord] = []
    nxt: dict[int, int] = {}
    for p, position in positions.items():
        batch, nxt[p], _ = read_partition(broker, topic, p, position, limit, key_filter)
        if batch.num_rows:
            records.extend(_rows(batch, p, fmt, topic))
    records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    return Page(records, nxt)
