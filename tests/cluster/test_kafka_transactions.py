"""Kafka transactions over three brokers (confluent-kafka): the transactional id's coordinator is one of
them, the partitions' leaders are spread over all three (a leader forwards a transaction's batches to the
coordinator), commit and abort leave committed records only in the Delta table, at contiguous offsets; after
a kill -9 of the coordinator's broker, a new instance of the producer is coordinated by another broker at
the next epoch (read back from ``_system/transactions``) and commits again."""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_harness import wait_for
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_cluster import FAST_ENV, KafkaBroker, kafka_sees, leaders, start_kafka_brokers, table_rows
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from topiclake.kafka.codec import build

pytestmark = pytest.mark.slow

TOPIC = "ctx"
TID = "cluster-tid"


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[KafkaBroker]]:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in FAST_ENV.items():
            mp.setenv(k, v)
        started = start_kafka_brokers(tmp_path / "wh", tmp_path, 3)
        try:
            yield started
        finally:
            for b in started:
                b.proc.stop()


def _txn_coordinator(broker: KafkaBroker, tid: str) -> int:
    req_cls = load_request_schema(10, 3)
    header_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    head = {"request_api_key": 10, "request_api_version": 3, "correlation_id": 1, "client_id": "t"}
    entity_writer(header_cls)(buf, build(header_cls, head))
    entity_writer(req_cls)(buf, build(req_cls, {"key": tid, "key_type": 1}))
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
    resp_cls = load_response_schema(10, 3)
    _h, n = entity_reader(resp_cls.__header_schema__)(data, 4)
    body = entity_reader(resp_cls)(data, 4 + n)[0]
    assert body.error_code == 0, body
    return int(body.node_id)


def _transaction(bs: str, values: list[str], commit: bool, producer: Producer | None = None) -> Producer:
    p = producer or Producer({"bootstrap.servers": bs, "transactional.id": TID, "linger.ms": 5})
    if producer is None:
        p.init_transactions(60)
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v.encode(), partition=i % 3)
    assert p.flush(30) == 0
    if commit:
        p.commit_transaction(60)
    else:
        p.abort_transaction(60)
    return p


def _committed(warehouse: Path) -> list[str]:
    rows = table_rows(warehouse, TOPIC)
    for p in range(3):
        offsets = sorted(o for q, o, _v in rows if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: {offsets}"
    return sorted(v.decode() for _p, _o, v in rows)


def test_transactions_over_three_brokers_and_the_coordinator_killed(
    brokers: list[KafkaBroker], tmp_path: Path
) -> None:
    bs = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient({"bootstrap.servers": bs})
    # replication factor 3: any broker may lead a partition (docs/cluster.md), so leaders move on a death
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    wait_for(lambda: len(set(leaders(brokers[0], TOPIC).values())) >= 2, 30, "leaders on several brokers")
    coordinator = _txn_coordinator(brokers[0], TID)
    assert all(_txn_coordinator(b, TID) == coordinator for b in brokers)
    first = [f"a{i}" for i in range(30)]
    p = _transaction(bs, first, commit=True)
    _transaction(bs, [f"x{i}" for i in range(9)], commit=False, producer=p)
    second = [f"b{i}" for i in range(9)]
    _transaction(bs, second, commit=True, producer=p)
    warehouse = tmp_path / "wh"
    assert _committed(warehouse) == sorted(first + second)
    # kill -9 the coordinator's broker: another broker coordinates the id, at the next epoch
    victim = next(b for b in brokers if b.broker_id == coordinator)
    victim.proc.kill9()
    alive = [b for b in brokers if b is not victim]
    wait_for(lambda: kafka_sees(alive[0], 2), 30, "two brokers left")
    wait_for(
        lambda: set(leaders(alive[0], TOPIC).values()) <= {b.broker_id for b in alive}, 30, "leaders moved"
    )
    assert _txn_coordinator(alive[0], TID) != coordinator
    third = [f"c{i}" for i in range(9)]
    _transaction(",".join(b.bootstrap for b in alive), third, commit=True)
    assert _committed(warehouse) == sorted(first + second + third)
