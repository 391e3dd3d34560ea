"""aiokafka round trip, and HTTP <-> Kafka byte for byte (key, value, headers, timestamp, timestamp type)."""

from __future__ import annotations

import asyncio
import base64

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka_harness import KafkaGateway

pytestmark = pytest.mark.slow


def test_aiokafka_round_trip(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("a", partitions=2)

    async def run() -> list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(
                    "a",
                    b"v%d" % i,
                    key=b"k%d" % i,
                    headers=[("n", b"%d" % i)],
                    timestamp_ms=1_700_000_000_000 + i,
                )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "a", bootstrap_servers=kafka.bootstrap, group_id="ag", auto_offset_reset="earliest"
        )
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(20):
                while len(got) < 20:
                    for msgs in (await consumer.getmany(timeout_ms=200)).values():
                        got += [(m.key, m.value, m.timestamp, list(m.headers)) for m in msgs]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted(
        (b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, [("n", b"%d" % i)]) for i in range(20)
    )
    committed = kafka.gw.broker.groups.committed("ag")
    assert sum(c.offset for c in committed.values()) == 20


RAW = bytes(range(256))


def test_http_to_kafka_and_back_byte_for_byte(kafka: KafkaGateway) -> None:
    gw = kafka.gw
    gw.broker.create_topic("x", partitions=1)
    b64 = base64.b64encode
    r = gw.client.post(
        "/v1/topics/x/records?encoding=binary",
        json={
            "records": [
                {
                    "key": b64(b"\x00key\xff").decode(),
                    "value": b64(RAW).decode(),
                    "headers": [{"key": "h", "value": b64(b"\x01\x02").decode()}],
                    "timestamp": 1_700_000_000_123,
                }
            ]
        },
    )
    assert r.status_code == 200, r.text
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "x1", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["x"])
        msg = None
        for _ in range(100):
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None
        assert msg.key() == b"\x00key\xff" and msg.value() == RAW
        assert msg.headers() == [("h", b"\x01\x02")]
        assert msg.timestamp() == (1, 1_700_000_000_123)  # (CreateTime, ms)
    finally:
        c.close()

    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    p.produce("x", key=b"\xfek", value=RAW[::-1], headers=[("z", b"\x00")], timestamp=1_700_000_000_456)
    assert p.flush(20) == 0
    got = gw.client.get(
        "/v1/topics/x/partitions/0/records", params={"offset": 1, "encoding": "binary"}
    ).json()
    rec = got["records"][0]
    assert base64.b64decode(rec["key"]) == b"\xfek" and base64.b64decode(rec["value"]) == RAW[::-1]
    assert rec["timestamp"] == 1_700_000_000_456 and rec["timestamp_type"] == "CreateTime"
    assert [(h["key"], base64.b64decode(h["value"])) for h in rec["headers"]] == [("z", b"\x00")]
