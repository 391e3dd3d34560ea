"""Client quotas on the Kafka listener: a producer over its byte rate is told throttle_time_ms and slowed
down, as by a Kafka broker, and every record it sent is still written; a consumer over its fetch byte rate
likewise, and it still reads every record."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, ThrottleEvent, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway, table_rows

from topiclake.platform import Record
from topiclake.process.ports import free_port

RATE = 40_000  # produce (and fetch) bytes/s of every (anonymous) client


@pytest.fixture
def kafka_quota(tmp_path: Path) -> Iterator[tuple[Gateway, int]]:
    port = free_port()
    quotas = {"quota_produce_bytes_per_s": RATE, "quota_fetch_bytes_per_s": RATE}
    gw, server, thread = start_gateway(tmp_path / "wh", settings_overrides=quotas, kafka_port=port)
    try:
        yield gw, port
    finally:
        stop_gateway(gw, server, thread)


@pytest.mark.slow
def test_a_producer_over_its_quota_is_throttled_and_loses_nothing(kafka_quota: tuple[Gateway, int]) -> None:
    gw, port = kafka_quota
    gw.broker.create_topic("throttled", 1)
    throttles: list[float] = []

    def on_throttle(event: ThrottleEvent) -> None:
        throttles.append(event.throttle_time)

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 16_384,
            "throttle_cb": on_throttle,
        }
    )
    delivered: list[int] = []
    n, size = 120, 1_000  # ~120 KB at 40 KB/s: 1 s of burst, then ~2 s of throttling
    started = time.monotonic()
    for i in range(n):
        producer.produce(
            "throttled",
            value=b"%06d" % i + b"x" * size,
            on_delivery=lambda e, m: delivered.append(0 if e else 1),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    elapsed = time.monotonic() - started
    producer.poll(0.5)  # throttle callbacks are served by poll
    assert sum(delivered) == n
    assert throttles and max(throttles) > 0, (throttles, elapsed)
    assert elapsed > 1.0, elapsed  # the broker held its answers back
    assert table_rows(gw, "throttled").num_rows == n


@pytest.mark.slow
def test_a_consumer_over_its_fetch_quota_is_throttled_and_reads_everything(
    kafka_quota: tuple[Gateway, int],
) -> None:
    gw, port = kafka_quota
    gw.broker.create_topic("fetched", 1)
    n, size = 150, 1_000  # ~150 KB at 40 KB/s: 1 s of burst, then ~2.7 s of throttling
    for start in range(0, n, 50):  # written by the broker itself: no Kafka bytes counted yet
        gw.broker.produce(
            "fetched", [Record(key=None, value=b"%06d" % i + b"x" * size) for i in range(start, start + 50)]
        )
    throttles: list[float] = []

    def on_throttle(event: ThrottleEvent) -> None:
        throttles.append(event.throttle_time)

    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "quota-reader",
            "enable.auto.commit": False,
            "message.max.bytes": 20_000,
            "fetch.max.bytes": 20_000,  # many fetches, so the throttle paces the stream
            "max.partition.fetch.bytes": 20_000,
            "throttle_cb": on_throttle,
        }
    )
    values: list[bytes] = []
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition("fetched", 0, 0)])
        deadline = started + 40  # bounded: the quota alone needs ~3 s
        while len(values) < n and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        elapsed = time.monotonic() - started
        consumer.poll(0.5)  # throttle callbacks are served by poll
    finally:
        consumer.close()
    assert [v[:6] for v in values] == [b"%06d" % i for i in range(n)]  # every record, in order
    assert throttles and max(throttles) > 0, (throttles, elapsed)
    # n * size bytes at RATE after one second of burst: the broker held its answers back to the quota
    paced = (n * size - RATE) / RATE
    assert elapsed > 0.8 * paced, (elapsed, paced, throttles)
