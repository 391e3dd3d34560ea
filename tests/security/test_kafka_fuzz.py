"""A seeded, bounded fuzz of Kafka frames against a real listener: truncated frames, wrong, negative and
huge sizes, unknown API keys and versions, garbage after a valid header, byte-flipped valid requests and
random bytes. Each bad connection is answered or closed; a well-behaved client on its own connection keeps
being served throughout; the broker logs no unhandled error."""

from __future__ import annotations

import logging
import random
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from tls_harness import Running, start

from topiclake.security import UserStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))
from kafka_harness import HELLO, frame, read_frame, response

SEED = int(__import__("os").environ.get("FUZZ_SEED", "20261124"))
CASES = int(__import__("os").environ.get("FUZZ_CASES", "4000"))

#: Valid requests whose byte-flipped variants are sent (read-mostly APIs: a flipped CreateTopics could
#: ask for a billion partitions, a flipped JoinGroup could hold a join barrier for a long time).
SEEDS: list[bytes] = [
    frame(18, 3, HELLO),
    frame(3, 12, {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": False}),
    frame(3, 4, {"topics": None, "allow_auto_topic_creation": False}),
    frame(
        1,
        12,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "fuzz",
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    ),
    frame(
        2,
        7,
        {
            "replica_id": -1,
            "topics": [{"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    ),
    frame(
        0,
        9,
        {
            "acks": -1,
            "timeout": 1000,
            "topic_data": [{"name": "fuzz", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}],
        },
    ),
    frame(10, 3, {"key": "fuzz-group", "key_type": 0}),
    frame(12, 4, {"group_id": "fuzz-group", "generation_id": 1, "member_id": "m"}),
    frame(9, 7, {"group_id": "fuzz-group", "topics": None}),
    frame(15, 5, {"groups": ["fuzz-group"], "include_authorized_operations": False}),
    frame(16, 4, {"states_filter": []}),
    frame(32, 4, {"resources": [{"resource_type": 2, "resource_name": "fuzz", "configuration_keys": None}]}),
    frame(17, 1, {"mechanism": "PLAIN"}),
    frame(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}),
]


def _sized(body: bytes, size: int | None = None) -> bytes:
    return struct.pack(">i", len(body) if size is None else size) + body


def _case(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    seed = rng.choice(SEEDS)
    body = seed[4:]
    if kind == 0:  # truncated: the size says more than is sent
        return seed[: rng.randrange(1, len(seed))]
    if kind == 1:  # a consistent size around a truncated body
        return _sized(body[: rng.randrange(0, len(body))])
    if kind == 2:  # negative, tiny or huge sizes
        return _sized(body, rng.choice([-1, -(2**31), 0, 3, 7, 2**31 - 1, 2**30, 64 * 1024 * 1024 + 1]))
    if kind == 3:  # unknown api keys and versions
        key, version = rng.choice([rng.randrange(-5, 200), 18, 3]), rng.randrange(-3, 60)
        return _sized(struct.pack(">hhih", key, version, rng.randrange(2**31), 1) + b"x" + rng.randbytes(12))
    if kind == 4:  # garbage after a valid header
        cut = 8 + rng.randrange(0, 12)
        return _sized(body[:cut] + rng.randbytes(rng.randrange(0, 64)))
    if kind == 5:  # byte flips in a valid request
        data = bytearray(body)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        return _sized(bytes(data))
    if kind == 6:  # a valid request followed by garbage on the same connection
        return seed + rng.randbytes(rng.randrange(1, 40))
    return rng.randbytes(rng.randrange(1, 200))  # random bytes


def _send(port: int, data: bytes) -> None:
    """Send, stop writing, read until the broker closes (bounded)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and sock.recv(65536):
                pass
        except OSError:
            pass


def _well_behaved(sock: socket.socket, n: int) -> None:
    sock.sendall(frame(18, 3, HELLO, correlation_id=n))
    assert int(response(18, 3, read_frame(sock)).error_code) == 0
    sock.sendall(
        frame(3, 12, {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": False}, correlation_id=n)
    )
    topics = response(3, 12, read_frame(sock)).topics
    assert [t.name for t in topics] == ["fuzz"] and int(topics[0].error_code) == 0


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(params=[False, True], ids=["open", "auth"])
def listener(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Running, _Errors, bool]]:
    """A listener, open or with auth on (then anything but ApiVersions/SASL before a login closes the
    connection; the well-behaved client logs in as a super user)."""
    errors = _Errors()
    logging.getLogger().addHandler(errors)
    auth = bool(request.param)
    options: dict[str, object] = {}
    if auth:
        users = tmp_path / "users.htpasswd"
        UserStore(users).add("admin", "admin-secret")
        options = {
            "auth": True,
            "users_file": str(users),
            "super_users": ["User:admin"],
            "kafka_sasl_mechanisms": "PLAIN,SCRAM-SHA-256",
        }
    running = start(tmp_path / "wh", **options)
    try:
        running.broker.create_topic("fuzz", 1)
        yield running, errors, auth
    finally:
        running.stop()
        logging.getLogger().removeHandler(errors)


def _login(sock: socket.socket) -> None:
    sock.sendall(frame(17, 1, {"mechanism": "PLAIN"}))
    assert int(response(17, 1, read_frame(sock)).error_code) == 0
    sock.sendall(frame(36, 2, {"auth_bytes": b"\0admin\0admin-secret"}))
    assert int(response(36, 2, read_frame(sock)).error_code) == 0


@pytest.mark.slow
def test_bad_frames_end_only_their_connection(listener: tuple[Running, _Errors, bool]) -> None:
    running, errors, auth = listener
    rng = random.Random(SEED)
    kinds: Callable[[], bytes] = lambda: _case(rng)  # noqa: E731
    with socket.create_connection(("127.0.0.1", running.kafka_port), timeout=10) as good:
        if auth:
            _login(good)
        _well_behaved(good, 0)
        started = time.monotonic()
        for i in range(1, CASES + 1):
            _send(running.kafka_port, kinds())
            if i % 100 == 0:
                _well_behaved(good, i)  # the same connection, open all along, is still served
            assert time.monotonic() - started < 90, f"fuzzing took too long ({i} cases)"
    # a real client still produces and consumes
    login = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    conf = {"bootstrap.servers": running.bootstrap, **(login if auth else {})}
    producer = Producer({**conf, "acks": "all"})
    producer.produce("fuzz", b"after")
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "after", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["fuzz"])
        deadline, got = time.monotonic() + 20, None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg.value()
    finally:
        consumer.close()
    assert got is not None
    assert [r.getMessage() for r in errors.records] == []
