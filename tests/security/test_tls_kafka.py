"""The Kafka listener over TLS (security.protocol=SSL) and mTLS, with confluent-kafka and kafka-python; a
plain-text client on the TLS port fails cleanly and the broker keeps serving the others."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tls_harness import Certs, Running, make_certs, start


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def mtls(tmp_path: Path, certs: Certs) -> Iterator[Running]:
    running = start(
        tmp_path / "wh",
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        tls_ca=str(certs.ca),
    )
    try:
        yield running
    finally:
        running.stop()


def _ssl(running: Running, certs: Certs, cn: str | None = "alice") -> dict[str, object]:
    conf: dict[str, object] = {
        "bootstrap.servers": running.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
    }
    if cn is not None:
        cert, key = certs.client(cn)
        conf["ssl.certificate.location"] = str(cert)
        conf["ssl.key.location"] = str(key)
    return conf


def _roundtrip(conf: dict[str, object], topic: str, n: int = 5) -> list[bytes]:
    admin = AdminClient(conf)
    for fut in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10).values():
        fut.result(timeout=20)
    producer = Producer({**conf, "enable.idempotence": True, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_confluent_kafka_over_mtls(mtls: Running, certs: Certs) -> None:
    assert _roundtrip(_ssl(mtls, certs), "secure") == [f"v{i}".encode() for i in range(5)]


def test_no_client_certificate_is_refused_and_plain_text_fails_cleanly(mtls: Running, certs: Certs) -> None:
    # librdkafka without a client certificate: the handshake is refused, metadata never comes
    admin = AdminClient({**_ssl(mtls, certs, cn=None), "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    # a plain-text Kafka frame on the TLS port: the connection ends, nothing is answered in Kafka's framing
    with socket.create_connection(("127.0.0.1", mtls.kafka_port), timeout=5) as sock:
        body = struct.pack(">hhih", 18, 3, 1, 1) + b"x" + b"\x00\x00\x00"
        sock.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except OSError:
            pass
        assert not data or data[0] == 0x15  # nothing, or a TLS alert record
    # random bytes, then nothing: the handshake times out or fails; the others are served meanwhile
    with socket.create_connection(("127.0.0.1", mtls.kafka_port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello")
        meta = AdminClient(_ssl(mtls, certs)).list_topics(timeout=10)
        assert meta.brokers


def test_kafka_python_over_mtls(mtls: Running, certs: Certs) -> None:
    from kafka.admin import NewTopic as KNewTopic

    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    cert, key = certs.client("carol")
    conf = {
        "bootstrap_servers": mtls.bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([KNewTopic("kp", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(**conf, acks="all")
    try:
        for i in range(3):
            producer.send("kp", f"k{i}".encode())
        producer.flush(20)
    finally:
        producer.close(5)
    consumer = KafkaConsumer("kp", **conf, auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        got = [m.value for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [b"k0", b"k1", b"k2"]


def test_tls_without_client_certificates(tmp_path: Path, certs: Certs) -> None:
    running = start(tmp_path / "wh", tls_cert=str(certs.server_cert), tls_key=str(certs.server_key))
    try:
        assert _roundtrip(_ssl(running, certs, cn=None), "tls-only", n=2) == [b"v0", b"v1"]
    finally:
        running.stop()
