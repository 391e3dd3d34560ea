"""Concurrent producers, two leaders on one partition, and a consumer reading while producers write.

Offsets must stay contiguous from 0 with no duplicates and no two records on one offset; every acknowledged
record is in the table exactly once at its acknowledged offset; per-key order is preserved.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from deltalake import DeltaTable

from thread_runs import in_threads
from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_for_key


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` in ``n`` threads; re-raise the first failure (a thread that hangs is one)."""
    errors = in_threads(n, target)
    if errors:
        raise errors[0]


def _table_rows(storage: Storage, topic: str) -> list[tuple[str, int, int, bytes | None]]:
    """(value, partition, offset, key) of every row of the topic table."""
    t = DeltaTable(storage.topic_uri(topic)).to_pyarrow_table(columns=["key", "value", "partition", "offset"])
    return list(
        zip(
            [v.decode() for v in t["value"].to_pylist()],
            t["partition"].to_pylist(),
            t["offset"].to_pylist(),
            t["key"].to_pylist(),
            strict=True,
        )
    )


def _check_log(rows: list[tuple[str, int, int, bytes | None]], partitions: int) -> None:
    """Per partition offsets are exactly 0..n-1; no value twice."""
    dup = [v for v, n in Counter(r[0] for r in rows).items() if n > 1]
    assert not dup, f"values written more than once: {dup[:10]}"
    for p in range(partitions):
        offsets = sorted(r[2] for r in rows if r[1] == p)
        shared = sorted(o for o, n in Counter(offsets).items() if n > 1)
        assert not shared, f"partition {p}: offsets shared by two records: {shared[:10]}"
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous from 0"


def _check_acked(acked: dict[str, tuple[int, int]], rows: list[tuple[str, int, int, bytes | None]]) -> None:
    written = {r[0]: (r[1], r[2]) for r in rows}
    lost = [v for v in acked if v not in written]
    assert not lost, f"{len(lost)} acknowledged records missing: {lost[:10]}"
    moved = [(v, acked[v], written[v]) for v in acked if acked[v] != written[v]]
    assert not moved, f"records not at their acknowledged offset (value, acked, table): {moved[:10]}"


def test_many_producers_keyed_records_contiguous_and_ordered_per_key(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    threads, batches, keys_per_thread, partitions = 8, 30, 6, 4
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    with Broker(storage, BrokerConfig(linger_ms=2)) as broker:
        broker.create_topic("t", partitions=partitions)

        def produce(t: int) -> None:
            rng = random.Random(t)
            counters = [0] * keys_per_thread
            for _ in range(batches):
                records = []
                for _ in range(rng.randint(1, 20)):
                    k = rng.randrange(keys_per_thread)
                    # value: "<key>:<per-key counter>"; each key is owned by one thread
                    records.append(Record(key=f"k{t}-{k}".encode(), value=f"k{t}-{k}:{counters[k]}".encode()))
                    counters[k] += 1
                results = broker.produce("t", records, acks="all")
                with lock:
                    for r, res in zip(records, results, strict=True):
                        assert res.error is None, res
                        assert res.offset is not None and res.partition is not None
                        acked[r.value.decode()] = (res.partition, res.offset)  # type: ignore[union-attr]

        _run_threads(threads, produce)
        ends = {p: broker.list_offsets("t", p, "latest") for p in range(partitions)}
        commits = broker.log("t").commits

    rows = _table_rows(storage, "t")
    _check_log(rows, partitions)
    _check_acked(acked, rows)
    assert len(rows) == len(acked)
    assert ends == {p: sum(1 for r in rows if r[1] == p) for p in range(partitions)}
    assert commits < threads * batches, f"no group commit: {commits} commits for {threads * batches} requests"

    by_key: dict[bytes, list[tuple[int, int, int]]] = {}
    for value, p, offset, key in rows:
        assert key is not None
        assert p == partition_for_key(key, partitions), f"key {key!r} in partition {p}"
        by_key.setdefault(key, []).append((offset, int(value.split(":")[1]), p))
    for key, seen in by_key.items():
        seen.sort()
        counters = [c for _, c, _ in seen]
        assert counters == list(range(len(counters))), f"key {key!r}: counters by offset {counters[:20]}"


def test_two_leaders_on_one_partition_fence_and_stay_contiguous(tmp_path: Path) -> None:
    storage_a, storage_b = Storage(str(tmp_path)), Storage(str(tmp_path))
    config = BrokerConfig(linger_ms=0)
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    broker_a = Broker(storage_a, config)
    broker_b = Broker(storage_b, BrokerConfig(linger_ms=0, broker_id=1))
    try:
        broker_a.create_topic("t", partitions=2)
        brokers = [broker_a, broker_b]
        for b in brokers:
            b.log("t")  # both open the (empty) table before either writes

        def produce(i: int) -> None:
            broker = brokers[i % 2]
            rng = random.Random(i)
            for n in range(25):
                values = [f"b{i % 2}-t{i}-{n}-{j}" for j in range(rng.randint(1, 4))]
                results = broker.produce("t", [Record(value=v.encode()) for v in values], partition=0)
                with lock:
                    for v, res in zip(values, results, strict=True):
                        assert res.error is None, res
                        assert res.partition == 0 and res.offset is not None
                        acked[v] = (res.partition, res.offset)

        _run_threads(6, produce)
        fences = broker_a.log("t").fences + broker_b.log("t").fences
    finally:
        broker_a.close()
        broker_b.close()

    rows = _table_rows(storage_a, "t")
    _check_log(rows, 2)
    _check_acked(acked, rows)
    assert len(rows) == len(acked)
    assert all(r[1] == 0 for r in rows)
    assert fences > 0, "two leaders wrote one partition and neither was fenced"
    acked_offsets = Counter(acked.values())
    assert max(acked_offsets.values()) == 1, "two acknowledged records share an offset"
    with Broker(storage_b, config) as fresh:
        assert fresh.list_offsets("t", 0, "latest") == len(rows)
        (res,) = fresh.produce("t", [Record(value=b"next")], partition=0)
        assert res.offset == len(rows)


def test_consumer_sees_every_offset_once_in_order_while_producers_write(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    partitions, producers, batches = 2, 4, 30
    done = threading.Event()
    consumed: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    problems: list[str] = []
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("t", partitions=partitions)

        def consume(p: int) -> None:
            offset = 0
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                finished = done.is_set()
                f = broker.fetch("t", p, offset, max_records=100, wait_ms=20)
                offsets = f.records["offset"].to_pylist()
                if offsets != list(range(offset, offset + len(offsets))):
                    problems.append(f"partition {p}: asked {offset}, got {offsets[:10]}")
                    return
                if offsets and offsets[-1] >= f.high_watermark:
                    problems.append(f"partition {p}: offset {offsets[-1]} beyond hwm {f.high_watermark}")
                    return
                values = [v.decode() for v in f.records["value"].to_pylist()]
                consumed[p].extend(zip(offsets, values, strict=True))
                offset = f.next_offset
                if finished and offset >= broker.list_offsets("t", p, "latest"):
                    return
            problems.append(f"partition {p}: consumer timed out at offset {offset}")

        consumers = [threading.Thread(target=consume, args=(p,), daemon=True) for p in range(partitions)]
        for c in consumers:
            c.start()

        def produce(i: int) -> None:
            rng = random.Random(100 + i)
            for n in range(batches):
                p = rng.randrange(partitions)
                values = [f"{i}-{n}-{j}" for j in range(rng.randint(1, 10))]
                results = broker.produce("t", [Record(value=v.encode()) for v in values], partition=p)
                assert all(r.error is None for r in results), results
                time.sleep(rng.uniform(0, 0.005))

        try:
            _run_threads(producers, produce)
        finally:
            done.set()
            for c in consumers:
                c.join(120)
    assert not problems, problems

    rows = _table_rows(storage, "t")
    _check_log(rows, partitions)
    for p in range(partitions):
        expected = sorted((o, v) for v, rp, o, _ in rows if rp == p)
        assert consumed[p] == expected, f"partition {p}: consumer saw {len(consumed[p])} of {len(expected)}"
    assert sum(len(c) for c in consumed.values()) == len(rows) > 0
