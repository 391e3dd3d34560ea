"""Spark's own ``format("kafka")`` (spark-sql-kafka-0-10, kafka-clients 3.9.2) against the listener: a
batch write, a batch read and an availableNow stream, with no line changed for topiclake; with
``kafka.isolation.level`` read_committed (and read_uncommitted) it sees neither aborted records nor those of
a transaction still open."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from gateway_harness import table_rows
from kafka_harness import KafkaGateway
from kafka_jars import spark_kafka_jars

from topiclake.platform import Record

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)"),
]


def test_spark_kafka_source_and_sink(kafka: KafkaGateway) -> None:
    broker = kafka.gw.broker
    broker.create_topic("sw", partitions=2)
    broker.create_topic("sr", partitions=2)
    broker.produce("sr", [Record(key=b"k%d" % i, value=b"r%d" % i) for i in range(30)])
    broker.create_topic("stx", partitions=2)
    txn = _transactions(kafka.bootstrap)  # open while Spark reads
    worker = Path(__file__).with_name("_spark_kafka_worker.py")
    cmd = [sys.executable, str(worker), kafka.bootstrap, ",".join(spark_kafka_jars())]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    finally:
        txn.abort_transaction(30)
    assert out.returncode == 0, out.stderr[-4000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(v for _k, v, _p, _o in seen["batch"]) == sorted(f"r{i}" for i in range(30))
    assert seen["streamed"] == sorted(f"r{i}" for i in range(30))
    committed = sorted(f"c{i}" for i in range(10))  # neither the aborted nor the open transaction's records
    assert seen["isolated"] == {"read_committed": committed, "read_uncommitted": committed}
    written = table_rows(kafka.gw, "sw")
    assert sorted(written["value"].to_pylist()) == sorted(b"v%d" % i for i in range(100))


def _transactions(bootstrap: str) -> Producer:
    """Topic ``stx``: a committed transaction (c0..c9 over both partitions), an aborted one (a0..a4), and
    an open one (o0..o4) whose producer is returned (the caller ends it)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spark-stx", "linger.ms": 5})
    p.init_transactions(30)
    for prefix, count, end in (
        ("c", 10, p.commit_transaction),
        ("a", 5, p.abort_transaction),
        ("o", 5, None),
    ):
        p.begin_transaction()
        for i in range(count):
            p.produce("stx", value=f"{prefix}{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        if end is not None:
            end(30)
    return p
