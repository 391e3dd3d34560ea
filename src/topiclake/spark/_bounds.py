"""Where a read of the ``topiclake`` source starts and ends: the partitions it reads, its starting and
ending offsets resolved from the options (offsets, timestamps, earliest/latest), and ``maxOffsetsPerTrigger``
shared over partitions. Used by the readers of :mod:`topiclake.spark.source`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from topiclake.errors import InvalidRequest, OffsetOutOfRange
from topiclake.spark._options import (
    EARLIEST,
    LATEST,
    OffsetBound,
    PartitionOffsets,
    ReaderOptions,
    TopicPartition,
)
from topiclake.spark._ranges import TopicSnapshot, Warehouse, offset_for_timestamp


def current_partitions(
    options: ReaderOptions, wh: Warehouse
) -> tuple[dict[str, TopicSnapshot], list[TopicPartition]]:
    """Snapshots of the subscribed topics that exist now, and the partitions read from them."""
    infos = wh.topics(options.subscription.wanted_topics(t.name for t in wh.catalog.list()))
    snaps = {name: wh.snapshot(info) for name, info in infos.items()}
    tps = [
        (name, p)
        for name, info in sorted(infos.items())
        for p in options.subscription.partitions_of(name, info.partitions)
    ]
    return snaps, tps


def resolve_bound(
    options: ReaderOptions,
    bound: OffsetBound,
    wh: Warehouse,
    snaps: Mapping[str, TopicSnapshot],
    tps: Sequence[TopicPartition],
    *,
    is_start: bool,
) -> PartitionOffsets:
    """Turn ``startingOffsets``/``endingOffsets`` (or their timestamp forms) into offsets per partition.

    Raises:
        InvalidRequest: The JSON misses partitions the query reads, or names ones it does not.
        OffsetOutOfRange: A starting timestamp has no offset (strategy ``error``), or a starting offset
            is beyond the end of its partition.
    """
    out: PartitionOffsets = {}
    given = bound.as_dict()
    if bound.kind in ("offsets", "timestamps"):
        missing = sorted(set(tps) - set(given))
        extra = sorted(set(given) - set(tps))
        if missing or extra:
            parts = []
            if missing:
                parts.append("it has no entry for " + ", ".join(f"{t}-{p}" for t, p in missing))
            if extra:
                parts.append(
                    "it names " + ", ".join(f"{t}-{p}" for t, p in extra) + " which this query does not read"
                )
            raise InvalidRequest(
                f"option '{bound.option}' must give every partition the query reads: " + "; ".join(parts),
                option=bound.option,
            )
    for tp in tps:
        topic, p = tp
        snap = snaps[topic]
        if bound.kind == "earliest":
            out[tp] = snap.log_start(p)
        elif bound.kind == "latest":
            out[tp] = snap.end(p)
        elif bound.kind == "offsets":
            value = given[tp]
            if value == EARLIEST:
                out[tp] = snap.log_start(p)
            elif value == LATEST:
                out[tp] = snap.end(p)
            elif value > snap.end(p) and is_start:
                raise OffsetOutOfRange(
                    f"option '{bound.option}': offset {value} of {topic}-{p} is beyond its end offset "
                    f"{snap.end(p)}",
                    topic=topic,
                    partition=p,
                    offset=value,
                    high_watermark=snap.end(p),
                )
            else:
                out[tp] = min(value, snap.end(p))
        else:
            ts = bound.timestamp if bound.kind == "timestamp" else given[tp]
            assert ts is not None
            found = offset_for_timestamp(wh.storage, snap, p, ts)
            if found is None:
                if is_start and options.timestamp_strategy == "error":
                    raise OffsetOutOfRange(
                        f"option '{bound.option}': no record of {topic}-{p} has a timestamp at or after {ts} "
                        "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)",
                        topic=topic,
                        partition=p,
                    )
                found = snap.end(p)
            out[tp] = found
    return out


def rate_limit(
    limit: int, starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """At most ``limit`` offsets in total, shared in proportion to what each partition has to read.

    Largest-remainder shares, so the total is exactly ``min(limit, available)`` and a batch always moves.
    """
    sizes = {tp: e - starts[tp] for tp, e in ends.items() if e > starts[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(ends)
    shares = {tp: limit * size / total for tp, size in sizes.items()}
    taken = {tp: math.floor(v) for tp, v in shares.items()}
    left = limit - sum(taken.values())
    for tp in sorted(shares, key=lambda tp: (taken[tp] - shares[tp], tp))[:left]:
        taken[tp] += 1
    out = dict(ends)
    for tp, n in taken.items():
        out[tp] = starts[tp] + n
    return out
