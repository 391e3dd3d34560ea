"""Kafka's own Java tools (kafka-tools 4.2.0, the Java client's classic transaction protocol) against one
gateway: TransactionalMessageCopier with random aborts and group metadata copies a topic exactly once, and
ProducerPerformance in 100 ms transactions; a read_committed VerifiableConsumer and the output topic's Delta
table (delta-rs) hold each input value exactly once, at contiguous offsets."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from gateway_harness import table_rows
from kafka_harness import KafkaGateway
from kafka_jars import classpath

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)"),
]

TOOLS = "org.apache.kafka.tools."


def _tool(cls: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = ["java", "-Xmx256m", "-cp", classpath(), TOOLS + cls, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _contiguous(kafka: KafkaGateway, topic: str) -> list[bytes]:
    rows = table_rows(kafka.gw, topic)
    parts = rows["partition"].to_pylist()
    offsets = rows["offset"].to_pylist()
    for p in set(parts):
        mine = [o for q, o in zip(parts, offsets, strict=True) if q == p]
        assert mine == list(range(len(mine))), f"{topic}/{p}: offsets not contiguous"
    return list(rows["value"].to_pylist())


def test_transactional_message_copier_copies_exactly_once(kafka: KafkaGateway, tmp_path: Path) -> None:
    n = 1000
    kafka.gw.broker.create_topic("jin", partitions=1)
    kafka.gw.broker.create_topic("jout", partitions=1)
    _seed(kafka, "jin", n)
    copier = _tool(
        "TransactionalMessageCopier",
        "--broker-list",
        kafka.bootstrap,
        "--transactional-id",
        "copier-0",
        "--input-topic",
        "jin",
        "--input-partition",
        "0",
        "--output-topic",
        "jout",
        "--consumer-group",
        "copiers",
        "--transaction-size",
        "50",
        "--enable-random-aborts",
        "--use-group-metadata",
        timeout=180,
    )
    assert copier.returncode == 0, copier.stderr[-3000:]
    events = [json.loads(line) for line in copier.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1].get("remaining") == 0, copier.stdout[-2000:]
    # the table holds each input exactly once: aborted copies never entered it
    values = _contiguous(kafka, "jout")
    assert sorted(int(v) for v in values) == list(range(n))
    config = tmp_path / "consumer.properties"
    config.write_text("isolation.level=read_committed\n")
    consumer = _tool(
        "VerifiableConsumer",
        "--bootstrap-server",
        kafka.bootstrap,
        "--topic",
        "jout",
        "--group-id",
        "verifier",
        "--max-messages",
        str(n),
        "--reset-policy",
        "earliest",
        "--consumer.config",
        str(config),
        timeout=120,
    )
    assert consumer.returncode == 0, consumer.stderr[-3000:]
    consumed = [json.loads(line) for line in consumer.stdout.splitlines() if line.startswith("{")]
    count = sum(e["count"] for e in consumed if e["name"] == "records_consumed")
    assert count == n


def _seed(kafka: KafkaGateway, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0


def _copier_args(kafka: KafkaGateway, src: str, dst: str, tid: str) -> list[str]:
    return [
        "--broker-list",
        kafka.bootstrap,
        "--transactional-id",
        tid,
        "--input-topic",
        src,
        "--input-partition",
        "0",
        "--output-topic",
        dst,
        "--consumer-group",
        f"{tid}-group",
        "--transaction-size",
        "20",
        "--use-group-metadata",
    ]


@pytest.mark.xfail(
    strict=False,
    reason="open (issue 31): in 1 of 2 full-suite runs the restarted copier's consumer could not determine "
    "its position within 60 s (TimeoutException for kin-0); passes alone; the cause is not found yet",
)
def test_a_copier_killed_mid_run_and_restarted_copies_exactly_once(kafka: KafkaGateway) -> None:
    n = 1000
    kafka.gw.broker.create_topic("kin", partitions=1)
    kafka.gw.broker.create_topic("kout", partitions=1)
    _seed(kafka, "kin", n)
    cmd = ["java", "-Xmx256m", "-cp", classpath(), TOOLS + "TransactionalMessageCopier"]
    args = _copier_args(kafka, "kin", "kout", "killed-0")
    first = subprocess.Popen([*cmd, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and table_rows(kafka.gw, "kout").num_rows < 200:
            time.sleep(0.2)
    finally:
        first.kill()  # SIGKILL: mid-transaction, no abort sent
        first.wait(30)
    copied = table_rows(kafka.gw, "kout").num_rows
    assert 200 <= copied < n, copied
    again = _tool("TransactionalMessageCopier", *args, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    values = _contiguous(kafka, "kout")
    assert sorted(int(v) for v in values) == list(range(n))  # no loss, no duplicate


def test_producer_performance_in_transactions(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("jperf", partitions=2)
    out = _tool(
        "ProducerPerformance",
        "--topic",
        "jperf",
        "--num-records",
        "3000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={kafka.bootstrap}",
        "--transactional-id",
        "perf-0",
        "--transaction-duration-ms",
        "100",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3000 records sent" in out.stdout, out.stdout[-2000:]
    assert len(_contiguous(kafka, "jperf")) == 3000
