"""Spark's own ``format("kafka")`` (spark-sql-kafka-0-10, kafka-clients 3.9.2) against the listener: a
batch write, a batch read and an availableNow stream, with no line changed for topiclake."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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
    worker = Path(__file__).with_name("_spark_kafka_worker.py")
    cmd = [sys.executable, str(worker), kafka.bootstrap, ",".join(spark_kafka_jars())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(v for _k, v, _p, _o in seen["batch"]) == sorted(f"r{i}" for i in range(30))
    assert seen["streamed"] == sorted(f"r{i}" for i in range(30))
    written = table_rows(kafka.gw, "sw")
    assert sorted(written["value"].to_pylist()) == sorted(b"v%d" % i for i in range(100))
