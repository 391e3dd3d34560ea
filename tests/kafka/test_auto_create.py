"""Topics created on first use, as Kafka's ``auto.create.topics.enable`` does (issue 27, item 4).

Real clients against a real gateway: librdkafka, kafka-python and Kafka's Java VerifiableProducer send to
a topic that does not exist, and HTTP produce routes (native, REST Proxy v2 and v3) do the same. With the
setting on, the topic appears with ``num_partitions`` partitions and holds the records; with it off, the
clients see what Kafka answers (unknown topic) and nothing is created.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from gateway_harness import start_gateway, stop_gateway, table_rows
from kafka.errors import KafkaTimeoutError
from kafka_harness import KafkaGateway
from kafka_jars import JAVA, classpath

from kafka import KafkaProducer
from topiclake.errors import TopicNotFound
from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow


def _gateway(root: Path, **options: object) -> Iterator[KafkaGateway]:
    port = free_port()
    gw, server, thread = start_gateway(root / "wh", kafka_port=port, **options)
    try:
        yield KafkaGateway(gw, f"127.0.0.1:{port}", port)
    finally:
        stop_gateway(gw, server, thread)


@pytest.fixture
def auto(tmp_path: Path) -> Iterator[KafkaGateway]:
    yield from _gateway(tmp_path, num_partitions=3)


@pytest.fixture
def no_auto(tmp_path: Path) -> Iterator[KafkaGateway]:
    yield from _gateway(tmp_path, auto_create_topics_enable=False)


def _librdkafka(bootstrap: str, topic: str, timeout: float = 30) -> list[KafkaError | None]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout * 1000)}
    )
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"from-librdkafka", key=b"k", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(timeout + 10)
    return errors


def test_kafka_clients_create_a_topic_by_producing_to_it(auto: KafkaGateway) -> None:
    assert _librdkafka(auto.bootstrap, "new.rdkafka") == [None]
    info = auto.gw.broker.describe_topic("new.rdkafka")
    assert info.partitions == 3  # num_partitions
    assert table_rows(auto.gw, "new.rdkafka")["value"].to_pylist() == [b"from-librdkafka"]

    producer = KafkaProducer(bootstrap_servers=auto.bootstrap, acks="all")
    try:
        producer.send("new.kafka-python", b"from-kafka-python").get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert table_rows(auto.gw, "new.kafka-python")["value"].to_pylist() == [b"from-kafka-python"]

    if shutil.which("java") is None:
        return
    cmd = [*JAVA, "-cp", classpath(), "org.apache.kafka.tools.VerifiableProducer"]
    cmd += ["--bootstrap-server", auto.bootstrap, "--topic", "new.java", "--max-messages", "5"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count('"name":"producer_send_success"') == 5, out.stdout
    assert sorted(table_rows(auto.gw, "new.java")["value"].to_pylist()) == [str(i).encode() for i in range(5)]


def test_http_produce_creates_a_topic_on_every_api(auto: KafkaGateway) -> None:
    url = auto.gw.url
    r = httpx.post(f"{url}/v1/topics/new.native/records", json={"records": [{"value": 1}]})
    assert r.status_code == 200, r.text
    v2 = "application/vnd.kafka.json.v2+json"
    r = httpx.post(f"{url}/topics/new.v2", json={"records": [{"value": 2}]}, headers={"content-type": v2})
    assert r.status_code == 200, r.text
    cluster = auto.gw.broker.cluster_id
    r = httpx.post(
        f"{url}/v3/clusters/{cluster}/topics/new.v3/records:batch",
        json={"entries": [{"id": "a", "value": {"type": "JSON", "data": 3}}]},
    )
    assert r.status_code == 207, r.text
    for name in ("new.native", "new.v2", "new.v3"):
        assert auto.gw.broker.describe_topic(name).partitions == 3
        assert len(table_rows(auto.gw, name)) == 1
    # a request that is not well formed is refused and creates nothing
    bad = [
        httpx.post(f"{url}/v1/topics/bad.native/records", json=None),
        httpx.post(f"{url}/v1/topics/bad.native/records", json={"records": []}),
        httpx.post(f"{url}/topics/bad.v2", content=b"{not json", headers={"content-type": v2}),
        httpx.post(f"{url}/v3/clusters/{cluster}/topics/bad.v3/records:batch", json={"entries": []}),
    ]
    assert [r.status_code // 100 for r in bad] == [4, 4, 4, 4], [r.text for r in bad]
    assert not {t.name for t in auto.gw.broker.list_topics()} & {"bad.native", "bad.v2", "bad.v3"}


def test_off_means_unknown_topic_as_in_kafka(no_auto: KafkaGateway) -> None:
    errors = _librdkafka(no_auto.bootstrap, "missing", timeout=5)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT), errors
    producer = KafkaProducer(bootstrap_servers=no_auto.bootstrap, max_block_ms=3000)
    try:
        with pytest.raises(KafkaTimeoutError):  # "Failed to update metadata": what Kafka's clients say
            producer.send("missing", b"x").get(timeout=10)
    finally:
        producer.close(timeout=5)
    r = httpx.post(f"{no_auto.gw.url}/v1/topics/missing/records", json={"records": [{"value": 1}]})
    assert r.status_code == 404, r.text
    with pytest.raises(TopicNotFound):
        no_auto.gw.broker.describe_topic("missing")
