"""Faults of the object store while producing: gone for seconds (S3 and Azure), slow, 503 SlowDown (S3).

The store is reached through the test's proxy: ``down()`` closes its port (connections refused, as when a
server is stopped; the S3 server behind it keeps its data, which moto holds in memory only), ``delay``
slows every request, ``inject_errors`` answers S3 errors. Producers retry what is refused as retriable;
afterwards every acknowledged record is in the table once, at its acknowledged offset.
"""

from __future__ import annotations

import threading
import time

from _s3_checks import check_acked, check_log, table_rows
from s3_harness import S3Warehouse
from store_harness import Warehouse

from topiclake.errors import TopiclakeError
from topiclake.platform import Broker, BrokerConfig, Record, Storage

PARTITIONS = 2


def _produce_until(
    broker: Broker, stop: threading.Event, acked: dict[str, tuple[int, int]], failures: list[str], name: str
) -> None:
    """Produce small batches until ``stop``; a retriable failure is retried with the same values."""
    n = 0
    deadline = time.monotonic() + 90
    while not stop.is_set() and time.monotonic() < deadline:
        values = [f"{name}-{n}-{j}" for j in range(3)]
        n += 1
        while time.monotonic() < deadline:
            try:
                results = broker.produce("t", [Record(value=v.encode()) for v in values])
            except TopiclakeError as exc:
                assert exc.retriable, exc
                failures.append(type(exc).__name__)
                time.sleep(0.2)
                continue
            errors = [r.error for r in results if r.error is not None]
            if errors:
                assert all(e.retriable for e in errors), errors
                failures.append(type(errors[0]).__name__)
                # a failed batch may be retried: values stay unique because each try gets new ones
                values = [f"{v}-retry" for v in values]
                time.sleep(0.2)
                continue
            for v, r in zip(values, results, strict=True):
                acked[v] = (r.partition, r.offset)  # type: ignore[assignment]
            break


def _run(s3: Warehouse, fault: object) -> tuple[dict[str, tuple[int, int]], list[str]]:
    acked: dict[str, tuple[int, int]] = {}
    failures: list[str] = []
    stop = threading.Event()
    storage = Storage(s3.uri, s3.options)
    with Broker(storage, BrokerConfig(linger_ms=2, request_timeout_ms=60_000)) as broker:
        broker.create_topic("t", partitions=PARTITIONS)
        threads = [
            threading.Thread(
                target=_produce_until, args=(broker, stop, acked, failures, f"p{i}"), daemon=True
            )
            for i in range(2)
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)
        before = len(acked)
        assert callable(fault)
        fault()
        during = len(acked)
        time.sleep(1.0)  # producing continues after the fault
        stop.set()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        after = len(acked)
    assert before > 0 and after > during, (before, during, after)
    rows = table_rows(storage, "t")
    check_log(rows, PARTITIONS)
    check_acked(acked, rows)
    return acked, failures


def test_store_gone_for_seconds_mid_produce(store: Warehouse) -> None:
    def outage() -> None:
        store.proxy.down()
        time.sleep(3)
        store.proxy.up()

    acked, _ = _run(store, outage)
    assert acked


def test_slow_store_mid_produce(s3: S3Warehouse) -> None:
    def slow() -> None:
        s3.proxy.delay(0.15)
        time.sleep(2)
        s3.proxy.delay(0)

    _run(s3, slow)


def test_503_slowdown_mid_produce(s3: S3Warehouse) -> None:
    def slowdown() -> None:
        s3.proxy.inject_errors(6, 503, "SlowDown", op="PUT")
        s3.proxy.inject_errors(6, 503, "SlowDown", op="GET")
        time.sleep(1.5)

    _run(s3, slowdown)
    assert s3.proxy.counts().get("injected_errors", 0) == 12  # every injected error was answered
