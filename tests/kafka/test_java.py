"""The Java client 4.2.0 through Kafka's own tools: console producer, console consumer, consumer groups."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from gateway_harness import table_rows
from kafka_harness import KafkaGateway
from kafka_jars import JAVA, classpath

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)"),
]


TOOLS = "org.apache.kafka.tools."


def _tool(cls: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [*JAVA, "-cp", classpath(), cls, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)


def test_console_producer_consumer_and_group_describe(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("j", partitions=2)
    bs = ["--bootstrap-server", kafka.bootstrap]
    props = ["--property", "parse.key=true", "--property", "key.separator=:"]
    out = _tool(
        "org.apache.kafka.tools.ConsoleProducer", *bs, "--topic", "j", *props, stdin="a:1\nb:2\nc:3\n"
    )
    assert out.returncode == 0, out.stderr
    rows = table_rows(kafka.gw, "j")
    assert sorted(zip(rows["key"].to_pylist(), rows["value"].to_pylist(), strict=True)) == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"c", b"3"),
    ]
    assert all(pid is not None for pid in rows["producer_id"].to_pylist())  # idempotent by default

    args = [
        "--topic",
        "j",
        "--group",
        "jg",
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "30000",
    ]
    out = _tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *bs,
        *args,
        "--formatter-property",
        "print.key=true",
    )
    assert out.returncode == 0, out.stderr
    assert sorted(line for line in out.stdout.splitlines() if "\t" in line) == ["a\t1", "b\t2", "c\t3"]

    out = _tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *bs, "--describe", "--group", "jg"
    )
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("jg ")]
    # every partition's committed offset is its end: the consumer committed what it read
    assert len(lines) == 2 and all(cur == end for _g, _t, _p, cur, end, *_ in lines)
    assert sum(int(cur) for _g, _t, _p, cur, *_ in lines) == 3


def test_describe_members_of_a_live_group(kafka: KafkaGateway) -> None:
    import threading
    import time

    from confluent_kafka import Consumer

    kafka.gw.broker.create_topic("live", partitions=3)
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "live", "auto.offset.reset": "earliest"})
    stop = threading.Event()
    assigned = threading.Event()

    def run() -> None:  # the consumer is used by this thread only
        c.subscribe(["live"])
        while not stop.is_set():
            c.poll(0.1)
            if c.assignment():
                assigned.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        assert assigned.wait(30)
        time.sleep(0.2)
        args = ["--describe", "--group", "live", "--members", "--verbose"]
        out = _tool(
            TOOLS + "consumer.group.ConsumerGroupCommand", "--bootstrap-server", kafka.bootstrap, *args
        )
        assert out.returncode == 0, out.stderr
        member = next(line.split() for line in out.stdout.splitlines() if line.startswith("live "))
        assert member[4] == "3" and "live:0,1,2" in member  # the assignment bytes the client leader sent
    finally:
        stop.set()
        t.join(10)
        c.close()
