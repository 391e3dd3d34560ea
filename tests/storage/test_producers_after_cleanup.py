"""Fresh idempotent Kafka producers on a topic whose early Delta log entries were cleaned up (issue 25).

A long-running broker checkpoints its busy topics and deletes the log entries behind each checkpoint. A
new idempotent producer makes the broker look up its state (a ``txn`` action); delta-rs reads those from
the log segment its snapshot was built from, which cleanup deleted, and every new producer was refused
(librdkafka saw a malformed answer, "Local: Bad message format"). Here a real ``topiclake serve`` checkpoints
every 2 versions with a log retention of 1 s, on a local disk and on the S3 API server, and three real clients
(librdkafka, kafka-python, Kafka's Java producer) each send one record as brand-new idempotent producers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from deltalake import DeltaTable
from pyarrow.fs import FileType
from s3_harness import S3Warehouse

from kafka import KafkaProducer
from serve_process import serving
from topiclake.platform import Storage
from topiclake.process.ports import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))

from kafka_jars import JAVA, classpath

pytestmark = pytest.mark.slow

TOPIC = "busy"
FIRST_ENTRY = "00000000000000000000.json"


@contextmanager
def _serve(warehouse: str, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    kafka_port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TOPICLAKE_"))}
    base.update(
        {
            "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0",
            "TOPICLAKE_BROKER__CHECKPOINT_INTERVAL": "2",
            "TOPICLAKE_BROKER__LOG_RETENTION_MS": "1000",
            "TOPICLAKE_BROKER__MAINTENANCE_INTERVAL_MS": "100",
            "TOPICLAKE_BROKER__LINGER_MS": "1",
            **env,
        }
    )
    with serving(warehouse, base, ["--kafka-port", str(kafka_port)]) as served:
        yield served.url, f"127.0.0.1:{kafka_port}"
    output = served.output[0]
    assert "UNKNOWN_SERVER_ERROR" not in output and "Traceback" not in output, output[-4000:]


def _busy_topic_cleaned(url: str, storage: Storage) -> int:
    """Create the topic and commit one record at a time until log cleanup has removed the table's first
    log entries (the snapshot the topic log opened with); return how many records were committed."""
    fs = storage.filesystem(storage.topic_uri(TOPIC))
    commits = 0
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code in (200, 201)
        deadline = time.monotonic() + 60
        while commits < 10 or fs.get_file_info(f"_delta_log/{FIRST_ENTRY}").type != FileType.NotFound:
            assert time.monotonic() < deadline, "log cleanup never removed the first entry"
            r = http.post(f"/v1/topics/{TOPIC}/records", json={"records": [{"value": f"http-{commits}"}]})
            assert r.status_code == 200, r.text
            commits += 1
            time.sleep(0.1)
    return commits


def _librdkafka(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[KafkaError] = []
    producer.produce(TOPIC, b"librdkafka", on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0
    assert not errors, errors


def _kafka_python(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        producer.send(TOPIC, b"kafka-python").get(timeout=30)
    finally:
        producer.close(timeout=10)


def _java(bootstrap: str) -> None:
    cmd = [*JAVA, "-cp", classpath(), "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server"]
    cmd += [bootstrap, "--topic", TOPIC, "--producer-property", "enable.idempotence=true"]
    cmd += ["--producer-property", "acks=all"]
    out = subprocess.run(cmd, input="java\n", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def _values(storage: Storage) -> list[bytes]:
    dt = DeltaTable(storage.topic_uri(TOPIC), storage_options=storage.options())
    return sorted(dt.to_pyarrow_table(columns=["value"])["value"].to_pylist())


def _scenario(warehouse: str, storage: Storage, env: dict[str, str]) -> None:
    clients = [_librdkafka, _kafka_python]
    if shutil.which("java") is not None:
        clients.append(_java)
    with _serve(warehouse, env) as (url, bootstrap):
        commits = _busy_topic_cleaned(url, storage)
        for client in clients:
            client(bootstrap)  # a brand-new producer id each, looked up against the cleaned log
    values = _values(storage)
    expected = [f'"http-{i}"'.encode() for i in range(commits)]  # JSON values, stored as JSON text
    expected += [c.__name__.strip("_").replace("_", "-").encode() for c in clients]
    assert values == sorted(expected)  # each once: nothing lost, nothing duplicated


def test_fresh_idempotent_producers_after_log_cleanup_on_a_local_disk(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    _scenario(warehouse, Storage(warehouse), {})


def test_fresh_idempotent_producers_after_log_cleanup_on_s3(s3: S3Warehouse) -> None:
    _scenario(s3.uri, Storage(s3.uri, s3.options), dict(s3.options))
