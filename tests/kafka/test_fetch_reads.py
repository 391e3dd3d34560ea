"""A consumer reads exactly what the table holds: from history (files the broker compacted, read through
file cursors, in small fetches and from a seek into the middle) and from the tail while producing, with
keys, null keys, headers, CreateTime and LogAppendTime timestamps."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from deltalake import DeltaTable
from gateway_harness import start_gateway, stop_gateway, table_rows
from kafka_harness import KafkaGateway

from topiclake.kafka.read_ahead import Answer, ReadAhead
from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow

N = 3000


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[KafkaGateway]:
    """No tail cache and no small-file cache: every fetch reads the table's files."""
    port = free_port()
    gw, server, thread = start_gateway(
        tmp_path / "wh", kafka_port=port, tail_cache_bytes=0, read_cache_bytes=0, compact_min_files=4
    )
    try:
        yield KafkaGateway(gw, f"127.0.0.1:{port}", port)
    finally:
        stop_gateway(gw, server, thread)


def _produce(bs: str, topic: str, n: int, per_flush: int) -> None:
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i}".encode()
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0 else None
        p.produce(topic, key=key, value=b"v" * (i % 300), headers=headers, timestamp=1_700_000_000_000 + i)
        if (i + 1) % per_flush == 0:
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def _expected(kafka: KafkaGateway, topic: str) -> list[tuple[Any, ...]]:
    rows = table_rows(kafka.gw, topic)
    stamps = pc.divide(pc.cast(rows["timestamp"], pa.int64()), 1000).to_pylist()
    return [
        (
            r["offset"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"] or []],
            ts,
            r["timestampType"],
        )
        for r, ts in zip(rows.to_pylist(), stamps, strict=True)
    ]


def _consume(bs: str, topic: str, start: int, n: int, **conf: Any) -> list[tuple[Any, ...]]:
    c = Consumer(
        {"bootstrap.servers": bs, "group.id": f"g-{topic}-{start}", "enable.auto.commit": False, **conf}
    )
    c.assign([TopicPartition(topic, 0, start)])
    out: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                out.append((m.offset(), m.key(), m.value(), list(m.headers() or []), ts, ts_type - 1))
    finally:
        c.close()
    return out


def _largest_file(kafka: KafkaGateway, topic: str) -> int:
    adds = pa.table(DeltaTable(kafka.gw.storage.topic_uri(topic)).get_add_actions(flatten=True))
    return int(pc.max(adds["num_records"]).as_py())


def test_history_from_compacted_files_reads_back_exactly(
    lake: KafkaGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[tuple[str, int, int, int]] = []  # the fetches answered by a read-ahead
    take = ReadAhead.take

    def counted(self: ReadAhead, key: tuple[str, int, int, int]) -> Answer | None:
        answer = take(self, key)
        if answer is not None:
            taken.append(key)
        return answer

    monkeypatch.setattr(ReadAhead, "take", counted)
    lake.gw.broker.create_topic("hist", partitions=1)
    _produce(lake.bootstrap, "hist", N, per_flush=100)  # ~30 small files, compacted into larger ones
    deadline = time.monotonic() + 60
    while _largest_file(lake, "hist") < 1000 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _largest_file(lake, "hist") >= 1000
    expected = _expected(lake, "hist")
    assert [e[0] for e in expected] == list(range(N))
    small_fetches = {"max.partition.fetch.bytes": 20_000}
    assert _consume(lake.bootstrap, "hist", 0, N, **small_fetches) == expected
    assert _consume(lake.bootstrap, "hist", 1234, N - 1234, **small_fetches) == expected[1234:]
    assert _consume(lake.bootstrap, "hist", 0, N) == expected  # the default: 1 MiB fetches
    # the small fetches' answers were cut by their limit: each next one was read ahead and taken
    assert len(taken) >= 10 and {k[3] for k in taken} == {20_000}


def test_log_append_time_history_reads_back_each_records_append_time(lake: KafkaGateway) -> None:
    lake.gw.broker.create_topic("lat", partitions=1, configs={"message.timestamp.type": "LogAppendTime"})
    _produce(lake.bootstrap, "lat", 600, per_flush=50)
    expected = _expected(lake, "lat")
    assert {e[5] for e in expected} == {1} and len({e[4] for e in expected}) > 1
    assert _consume(lake.bootstrap, "lat", 0, 600, **{"max.partition.fetch.bytes": 5_000}) == expected


def test_tail_read_while_producing(tmp_path: Path) -> None:
    port = free_port()
    gw, server, thread = start_gateway(tmp_path / "wh", kafka_port=port)
    kafka = KafkaGateway(gw, f"127.0.0.1:{port}", port)
    try:
        gw.broker.create_topic("tail", partitions=1)
        got: list[list[tuple[Any, ...]]] = []
        reader = threading.Thread(target=lambda: got.append(_consume(kafka.bootstrap, "tail", 0, N)))
        reader.start()
        time.sleep(0.5)
        _produce(kafka.bootstrap, "tail", N, per_flush=10)
        reader.join(90)
        assert got and got[0] == _expected(kafka, "tail")
    finally:
        stop_gateway(gw, server, thread)


def test_waiting_consumer_of_three_partitions_is_woken_by_each_commit(kafka: KafkaGateway) -> None:
    """A consumer at the tail of three partitions, its fetches waiting up to 3 s: each one-record commit
    reaches it long before that (the commit wakes the waiting fetch), and a burst bigger than what the
    event loop encodes itself comes whole and in order."""
    kafka.gw.broker.create_topic("wake", partitions=3)
    c = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": "g-wake",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 3000,
            "fetch.queue.backoff.ms": 0,
        }
    )
    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 0})
    c.assign([TopicPartition("wake", i, 0) for i in range(3)])

    def next_values(n: int, timeout_s: float) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=n - len(out), timeout=0.05):
                assert m.error() is None, m.error()
                out.append((m.partition(), m.value()))
        return out

    try:
        for i in range(3):
            p.produce("wake", b"warm", partition=i)
        assert p.flush(30) == 0
        assert len(next_values(3, 30)) == 3
        time.sleep(0.2)  # the consumer's fetches now wait at the end of every partition
        took = []
        for i in range(12):
            started = time.monotonic()
            p.produce("wake", f"r{i}".encode(), partition=i % 3)
            assert p.flush(30) == 0
            assert next_values(1, 10) == [(i % 3, f"r{i}".encode())]
            took.append(time.monotonic() - started)
        assert max(took) < 1.5, took  # woken by the commit, not by the end of the 3-s wait
        burst = [f"b{i}".encode() for i in range(2500)]
        for v in burst:
            p.produce("wake", v, partition=1)
        assert p.flush(30) == 0
        assert next_values(len(burst), 30) == [(1, v) for v in burst]
    finally:
        c.close()
