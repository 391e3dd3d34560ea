"""Kafka transactions with confluent-kafka (librdkafka) against one gateway: commit and abort over several
partitions and topics, records of an open transaction invisible, sendOffsetsToTransaction, a zombie fenced
by a new instance, a transaction that times out, OffsetFetch require_stable; read_committed consumers and
the topic's Delta table (read with delta-rs) only ever show committed records, at contiguous offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_harness import table_rows
from kafka_harness import KafkaGateway, frame, read_frame, response

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kafka(module_kafka: KafkaGateway) -> KafkaGateway:
    """The module's one gateway (each test uses topics and transactional ids of its own)."""
    return module_kafka


def _create(bs: str, **topics: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in topics.items()]
    )
    for f in futures.values():
        f.result(30)


def _producer(bs: str, tid: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def _send(p: Producer, topic: str, values: list[str], partitions: int = 1) -> None:
    for i, v in enumerate(values):
        p.produce(topic, key=v.encode(), value=v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _read(
    bs: str, topics: list[str], expect: int, isolation: str = "read_committed", wait_s: float = 15
) -> list[str]:
    """Values a fresh consumer (no group commits) reads from the start, until ``expect`` or ``wait_s``."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.subscribe(topics)
    got: list[str] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and len(got) < expect:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        if len(got) >= expect:  # then make sure nothing more comes
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append(msg.value().decode())
    finally:
        c.close()
    return got


def _table_values(kafka: KafkaGateway, topic: str) -> list[str]:
    rows = table_rows(kafka.gw, topic)
    for p in set(rows["partition"].to_pylist()):
        offsets = [
            o
            for q, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)
            if q == p
        ]
        assert offsets == list(range(len(offsets))), f"partition {p} offsets not contiguous: {offsets}"
    return sorted(v.decode() for v in rows["value"].to_pylist())


def test_commit_and_abort_over_partitions_and_topics(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, tx_a=2, tx_b=1)
    p = _producer(bs, "tid-basic")
    p.begin_transaction()
    _send(p, "tx_a", [f"c1-{i}" for i in range(10)], partitions=2)
    _send(p, "tx_b", [f"c1b-{i}" for i in range(5)])
    p.commit_transaction(30)
    p.begin_transaction()
    _send(p, "tx_a", [f"ab-{i}" for i in range(7)], partitions=2)
    _send(p, "tx_b", ["ab-b"])
    p.abort_transaction(30)
    p.begin_transaction()
    _send(p, "tx_a", [f"c2-{i}" for i in range(3)], partitions=2)
    p.commit_transaction(30)
    committed_a = sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(3)])
    committed_b = sorted(f"c1b-{i}" for i in range(5))
    assert sorted(_read(bs, ["tx_a", "tx_b"], 18)) == sorted(committed_a + committed_b)
    # the table is the one copy: only committed records, offsets 0.. with no holes
    assert _table_values(kafka, "tx_a") == committed_a
    assert _table_values(kafka, "tx_b") == committed_b
    # read_uncommitted sees the same: aborted records never entered the log
    assert sorted(_read(bs, ["tx_a"], 13, isolation="read_uncommitted")) == committed_a


def test_open_transaction_is_invisible_until_commit(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, tx_open=1)
    p = _producer(bs, "tid-open")
    p.begin_transaction()
    _send(p, "tx_open", ["o1", "o2", "o3"])  # acknowledged, transaction still open
    assert _read(bs, ["tx_open"], 1, wait_s=2) == []
    assert _read(bs, ["tx_open"], 1, isolation="read_uncommitted", wait_s=1) == []
    assert table_rows(kafka.gw, "tx_open").num_rows == 0
    p.commit_transaction(30)
    assert sorted(_read(bs, ["tx_open"], 3)) == ["o1", "o2", "o3"]
    assert _table_values(kafka, "tx_open") == ["o1", "o2", "o3"]


def _copy(bs: str, tid: str, src: str, dst: str, group: str, n: int, commit: bool) -> None:
    """Consume ``n`` records of ``src`` in ``group`` and copy them to ``dst`` in one transaction whose
    offsets are sent with sendOffsetsToTransaction; commit or abort it."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.subscribe([src])
    p = _producer(bs, tid)
    try:
        p.begin_transaction()
        seen = 0
        deadline = time.monotonic() + 30
        while seen < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            p.produce(dst, key=msg.key(), value=msg.value())
            seen += 1
        assert seen == n
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    finally:
        c.close()


def _committed(bs: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


def test_send_offsets_to_transaction(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, tx_in=1, tx_out=1)
    plain = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(20):
        plain.produce("tx_in", value=f"in-{i}".encode())
    assert plain.flush(30) == 0
    _copy(bs, "tid-copy", "tx_in", "tx_out", "copier", 20, commit=False)
    assert _committed(bs, "copier", "tx_in") < 0  # the aborted transaction's offsets were never committed
    assert _table_values(kafka, "tx_out") == []
    _copy(bs, "tid-copy", "tx_in", "tx_out", "copier", 20, commit=True)
    assert _committed(bs, "copier", "tx_in") == 20
    assert _table_values(kafka, "tx_out") == sorted(f"in-{i}" for i in range(20))


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, tx_zombie=1)
    zombie = _producer(bs, "tid-zombie")
    zombie.begin_transaction()
    _send(zombie, "tx_zombie", ["z1", "z2"])
    fresh = _producer(bs, "tid-zombie")  # bumps the epoch and aborts the zombie's open transaction
    fresh.begin_transaction()
    _send(fresh, "tx_zombie", ["f1"])
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(10)
    assert info.value.args[0].fatal() or not info.value.args[0].retriable()
    assert _read(bs, ["tx_zombie"], 1) == ["f1"]
    assert _table_values(kafka, "tx_zombie") == ["f1"]


def test_a_transaction_that_times_out_is_aborted(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    _create(bs, tx_slow=1)
    p = _producer(bs, "tid-slow", **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
    p.begin_transaction()
    _send(p, "tx_slow", ["late"])
    time.sleep(3.5)  # the sweep (every second) aborts it and bumps the epoch
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert table_rows(kafka.gw, "tx_slow").num_rows == 0
    again = _producer(bs, "tid-slow", **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
    again.begin_transaction()
    _send(again, "tx_slow", ["on time"])
    again.commit_transaction(30)
    assert _table_values(kafka, "tx_slow") == ["on time"]


def _rpc(kafka: KafkaGateway, api_key: int, version: int, body: dict[str, Any]) -> Any:
    import socket

    with socket.create_connection(("127.0.0.1", kafka.port), timeout=10) as s:
        s.sendall(frame(api_key, version, body))
        return response(api_key, version, read_frame(s))


def test_offset_fetch_require_stable_while_offsets_are_pending(kafka: KafkaGateway) -> None:
    _create(kafka.bootstrap, tx_stable=1)
    tid = "tid-stable"
    init = _rpc(
        kafka,
        22,
        3,
        {"transactional_id": tid, "transaction_timeout": 30_000, "producer_id": -1, "producer_epoch": -1},
    )
    assert init.error_code == 0
    ids = {"transactional_id": tid, "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    assert _rpc(kafka, 25, 1, {**ids, "group_id": "stable-g"}).error_code == 0
    commit = {
        **ids,
        "group_id": "stable-g",
        "topics": [
            {
                "name": "tx_stable",
                "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}],
            }
        ],
    }
    assert _rpc(kafka, 28, 2, commit).topics[0].partitions[0].error_code == 0
    ask = {"group_id": "stable-g", "topics": [{"name": "tx_stable", "partition_indexes": [0]}]}
    stable = _rpc(kafka, 9, 7, {**ask, "require_stable": True})
    assert stable.topics[0].partitions[0].error_code == 88  # UNSTABLE_OFFSET_COMMIT
    assert _rpc(kafka, 9, 7, {**ask, "require_stable": False}).topics[0].partitions[0].error_code == 0
    assert _rpc(kafka, 26, 1, {**ids, "committed": False}).error_code == 0
    assert _rpc(kafka, 9, 7, {**ask, "require_stable": True}).topics[0].partitions[0].error_code == 0
    # a stale epoch is fenced (v0 of EndTxn answers INVALID_PRODUCER_EPOCH, v2+ PRODUCER_FENCED)
    stale = {**ids, "producer_epoch": init.producer_epoch - 1 if init.producer_epoch else 99}
    assert _rpc(kafka, 26, 1, {**stale, "committed": True}).error_code == 47
    assert _rpc(kafka, 26, 3, {**stale, "committed": True}).error_code == 90


def test_aiokafka_transactional_producer(kafka: KafkaGateway) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    _create(kafka.bootstrap, tx_aio=2)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="tid-aio")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait("tx_aio", b"a1", partition=0)
                await p.send_and_wait("tx_aio", b"a2", partition=1)
            await p.begin_transaction()
            await p.send_and_wait("tx_aio", b"aborted", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait("tx_aio", b"a3", partition=0)
        finally:
            await p.stop()

    asyncio.run(run())
    assert _table_values(kafka, "tx_aio") == ["a1", "a2", "a3"]
    assert sorted(_read(kafka.bootstrap, ["tx_aio"], 3)) == ["a1", "a2", "a3"]


def test_list_and_describe_transactions(kafka: KafkaGateway) -> None:
    _create(kafka.bootstrap, tx_list=1)
    p = _producer(kafka.bootstrap, "tid-listed")
    p.begin_transaction()
    _send(p, "tx_list", ["l1"])
    listed = _rpc(
        kafka, 66, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1}
    )
    assert listed.error_code == 0
    assert "tid-listed" in [t.transactional_id for t in listed.transaction_states]
    (desc,) = _rpc(kafka, 65, 0, {"transactional_ids": ["tid-listed"]}).transaction_states
    assert (desc.error_code, desc.transaction_state) == (0, "Ongoing")
    assert [(t.topic, list(t.partitions)) for t in desc.topics] == [("tx_list", [0])]
    p.commit_transaction(30)
    (desc,) = _rpc(kafka, 65, 0, {"transactional_ids": ["tid-listed"]}).transaction_states
    assert desc.transaction_state == "CompleteCommit"
    (missing,) = _rpc(kafka, 65, 0, {"transactional_ids": ["nobody"]}).transaction_states
    assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    none = _rpc(kafka, 66, 0, {"state_filters": ["Bogus"], "producer_id_filters": []})
    assert list(none.unknown_state_filters) == ["Bogus"] and not none.transaction_states
