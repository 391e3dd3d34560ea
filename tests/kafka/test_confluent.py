"""confluent-kafka (librdkafka) against the Kafka listener: every codec, idempotent acks=all, a group of two
members splitting the partitions, commit, restart and resume exactly after the commit."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_harness import table_rows
from kafka_harness import KafkaGateway

pytestmark = pytest.mark.slow


def _create(bs: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(30)
    assert name in admin.list_topics(timeout=10).topics


def _produce(bs: str, topic: str, n: int, codec: str, prefix: str = "") -> None:
    p = Producer(
        {
            "bootstrap.servers": bs,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        p.produce(
            topic,
            key=f"{prefix}k{i}".encode(),
            value=f"{prefix}v{i}".encode(),
            headers=[("codec", codec.encode())],
            on_delivery=report,
        )
    assert p.flush(30) == 0
    assert not errors


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_lands_in_the_table(kafka: KafkaGateway, codec: str) -> None:
    _create(kafka.bootstrap, "c", 2)
    _produce(kafka.bootstrap, "c", 50, codec)
    rows = table_rows(kafka.gw, "c")
    assert sorted(rows["value"].to_pylist()) == sorted(f"v{i}".encode() for i in range(50))
    assert {h[0]["value"] for h in rows["headers"].to_pylist()} == {codec.encode()}


def _consume(members: list[Consumer], want: int, timeout_s: float = 40) -> list[list[tuple[int, int]]]:
    got: list[list[tuple[int, int]]] = [[] for _ in members]
    owned: list[list[int]] = [[] for _ in members]
    done = threading.Event()
    deadline = time.monotonic() + timeout_s

    def run(i: int, c: Consumer) -> None:  # a consumer is used by its own thread only
        while not done.is_set() and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got[i].append((msg.partition(), msg.offset()))
            owned[i] = [tp.partition for tp in c.assignment()]

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(members)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        if sum(map(len, got)) >= want and all(owned):
            break
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(10)
    return got


def test_group_of_two_commit_restart_resume(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, "orders", 4)
    _produce(bs, "orders", 80, "lz4")
    conf = {
        "bootstrap.servers": bs,
        "group.id": "billing",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    members = [Consumer(conf) for _ in range(2)]
    try:
        for c in members:
            c.subscribe(["orders"])
        _consume(members, 80)
        owned = [sorted(tp.partition for tp in c.assignment()) for c in members]
        assert sorted(owned[0] + owned[1]) == [0, 1, 2, 3] and all(owned)
        for c in members:  # commit offset 3 of every partition the member owns
            c.commit(
                offsets=[TopicPartition("orders", tp.partition, 3) for tp in c.assignment()],
                asynchronous=False,
            )
    finally:
        for c in members:
            c.close()
    committed = kafka.gw.broker.groups.committed("billing")  # the offsets table HTTP groups use too
    assert {(tp[1], c.offset) for tp, c in committed.items()} == {(p, 3) for p in range(4)}

    again = Consumer(conf)
    try:
        again.subscribe(["orders"])
        got = _consume([again], 80 - 12)[0]
        assert len(got) == 80 - 12
        assert min(off for _p, off in got) == 3  # resumed exactly after the commit, nothing before it
        assert len(set(got)) == len(got)
    finally:
        again.close()


def test_a_produce_failing_as_a_whole_is_answered_per_partition(
    kafka: KafkaGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in the broker (not the client's fault) reaches librdkafka as
    UNKNOWN_SERVER_ERROR on each partition it asked for, not as a malformed answer (_BAD_MSG)."""
    kafka.gw.broker.create_topic("whole", partitions=2)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("injected: the broker failed unexpectedly")

    monkeypatch.setattr(kafka.gw.broker, "start_rows", broken)
    monkeypatch.setattr(kafka.gw.broker, "produce_arrow", broken)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "retries": 0, "linger.ms": 5})
    codes: list[int] = []
    for p in (0, 1):
        producer.produce("whole", b"v", partition=p, on_delivery=lambda err, _m: codes.append(err.code()))
    assert producer.flush(30) == 0
    assert codes == [KafkaError.UNKNOWN, KafkaError.UNKNOWN]  # the broker's -1, per partition
