"""Checks shared by the object-storage tests: read a topic table from the bucket, check the log's rules;
produce keyed records and run producers side by side."""

from __future__ import annotations

from collections import Counter

from deltalake import DeltaTable

from topiclake.platform import Broker, Record, Storage

Row = tuple[str, int, int]  # value, partition, offset


def table_rows(storage: Storage, topic: str) -> list[Row]:
    """(value, partition, offset) of every row of the topic's table, read from the store."""
    t = DeltaTable(storage.topic_uri(topic), storage_options=storage.options()).to_pyarrow_table(
        columns=["value", "partition", "offset"]
    )
    values = [v.decode() for v in t["value"].to_pylist()]
    return list(zip(values, t["partition"].to_pylist(), t["offset"].to_pylist(), strict=True))


def check_log(rows: list[Row], partitions: int) -> None:
    """Per partition the offsets are exactly 0..n-1, and no value is there twice."""
    dup = [v for v, n in Counter(r[0] for r in rows).items() if n > 1]
    assert not dup, f"values written more than once: {dup[:10]}"
    for p in range(partitions):
        offsets = sorted(r[2] for r in rows if r[1] == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not unique and contiguous"


def check_acked(acked: dict[str, tuple[int, int]], rows: list[Row]) -> None:
    """Every acknowledged record is in the table at its acknowledged partition and offset."""
    written = {r[0]: (r[1], r[2]) for r in rows}
    lost = [v for v in acked if v not in written]
    assert not lost, f"{len(lost)} acknowledged records missing: {lost[:10]}"
    moved = [(v, acked[v], written[v]) for v in acked if acked[v] != written[v]]
    assert not moved, f"records not at their acknowledged offset: {moved[:10]}"


def produce_keyed(broker: Broker, values: list[str], acked: dict[str, tuple[int, int]]) -> None:
    """Produce ``values`` to topic ``t`` (each its own key, so partitioned by key); record where each was
    acknowledged in ``acked``."""
    results = broker.produce("t", [Record(key=v.encode(), value=v.encode()) for v in values])
    for v, r in zip(values, results, strict=True):
        assert r.error is None, r
        acked[v] = (r.partition, r.offset)  # type: ignore[assignment]
