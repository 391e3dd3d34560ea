"""SASL on the Kafka listener with real clients: SCRAM-SHA-256/512 (confluent-kafka, kafka-python), PLAIN
over TLS, PLAIN over plain text only when the operator lists it, wrong credentials refused without saying
which part was wrong, and no request but ApiVersions/SASL before authentication."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tls_harness import Certs, Running, make_certs, start

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))
from kafka_harness import frame, read_frame, response

from topiclake.security import UserStore

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.htpasswd"
    store = UserStore(path)
    for name, password in PASSWORDS.items():
        store.add(name, password)
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def sasl_plaintext(tmp_path: Path, users: Path) -> Iterator[Running]:
    running = start(
        tmp_path / "wh",
        auth=True,
        users_file=str(users),
        super_users=["User:admin"],
        kafka_sasl_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    )
    try:
        yield running
    finally:
        running.stop()


def sasl_conf(running: Running, user: str, mechanism: str = "SCRAM-SHA-256", **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": running.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS.get(user, "nope"),
        **extra,
    }


def _create(conf: dict[str, Any], topic: str) -> None:
    admin = AdminClient(conf)
    for fut in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10).values():
        fut.result(timeout=20)


def _exchange(port: int, mechanism: str, token: bytes) -> tuple[int, str | None, bool]:
    """Raw SaslHandshake + one SaslAuthenticate: (error code, message, whether the broker then closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frame(17, 1, {"mechanism": mechanism}))
        assert int(response(17, 1, read_frame(sock)).error_code) == 0
        sock.sendall(frame(36, 2, {"auth_bytes": token}))
        answer = response(36, 2, read_frame(sock))
        sock.settimeout(1)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False  # still open: nothing more to read
        except OSError:
            closed = True
        return int(answer.error_code), answer.error_message, closed


def test_scram_users_produce_and_a_wrong_password_is_refused(sasl_plaintext: Running) -> None:
    _create(sasl_conf(sasl_plaintext, "admin", "SCRAM-SHA-512"), "orders")
    producer = Producer({**sasl_conf(sasl_plaintext, "admin", "SCRAM-SHA-256"), "acks": "all"})
    producer.produce("orders", b"hello")
    assert producer.flush(20) == 0
    assert sasl_plaintext.broker.fetch("orders", 0, 0, 10, 1 << 20).records.num_rows == 1
    bad = {**sasl_conf(sasl_plaintext, "alice"), "sasl.password": "wrong"}
    assert any("Authentication failed" in str(e) for e in _errors(bad))


def _errors(conf: dict[str, Any], seconds: float = 5) -> list[Any]:
    """The errors a client reports (error_cb, served by poll) while it tries to connect."""
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    return errors


def test_wrong_user_and_wrong_password_look_the_same(sasl_plaintext: Running) -> None:
    port = sasl_plaintext.kafka_port
    code_pw, msg_pw, closed_pw = _exchange(port, "PLAIN", b"\0alice\0wrong")
    code_user, msg_user, closed_user = _exchange(port, "PLAIN", b"\0mallory\0wrong")
    assert code_pw == code_user == 58  # SASL_AUTHENTICATION_FAILED
    assert msg_pw == msg_user and msg_pw is not None
    assert "alice" not in msg_pw and "password" not in msg_pw.lower() and "user" not in msg_pw.lower()
    assert closed_pw and closed_user
    assert _exchange(port, "PLAIN", b"\0alice\0alice-secret") == (0, None, False)


def test_requests_before_authentication_close_the_connection(sasl_plaintext: Running) -> None:
    with socket.create_connection(("127.0.0.1", sasl_plaintext.kafka_port), timeout=10) as sock:
        sock.sendall(frame(18, 3, {"client_software_name": "t", "client_software_version": "1"}))
        assert int(response(18, 3, read_frame(sock)).error_code) == 0  # ApiVersions is fine
        sock.sendall(frame(3, 12, {"topics": None, "allow_auto_topic_creation": False}))
        with pytest.raises((ConnectionError, OSError)):
            read_frame(sock)
    # an unknown mechanism is answered with the offered ones
    with socket.create_connection(("127.0.0.1", sasl_plaintext.kafka_port), timeout=10) as sock:
        sock.sendall(frame(17, 1, {"mechanism": "GSSAPI"}))
        answer = response(17, 1, read_frame(sock))
        assert int(answer.error_code) == 33
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_kafka_python_scram_sha_512(sasl_plaintext: Running) -> None:
    from kafka.admin import NewTopic as KNewTopic

    from kafka import KafkaAdminClient, KafkaProducer

    conf = {
        "bootstrap_servers": sasl_plaintext.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "admin",
        "sasl_plain_password": PASSWORDS["admin"],
    }
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([KNewTopic("kp", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(**conf, acks="all")
    try:
        producer.send("kp", b"x").get(timeout=20)
    finally:
        producer.close(5)


def test_plain_is_offered_over_tls_only_by_default(tmp_path: Path, users: Path, certs: Certs) -> None:
    running = start(
        tmp_path / "wh",
        auth=True,
        users_file=str(users),
        super_users=["User:admin"],
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
    )
    try:
        conf = {
            "bootstrap.servers": running.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": PASSWORDS["admin"],
        }
        assert AdminClient(conf).list_topics(timeout=10).brokers
    finally:
        running.stop()
    plain = start(tmp_path / "wh2", auth=True, users_file=str(users), super_users=["User:admin"])
    try:
        errors = _errors(sasl_conf(plain, "admin", "PLAIN"))
        assert any("PLAIN" in str(e) for e in errors), errors  # not offered without TLS
    finally:
        plain.stop()
