"""One group namespace across protocols, and LogAppendTime topics seen the same over Kafka and HTTP."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from kafka_harness import KafkaGateway, connect, frame, read_frame, response

from topiclake.errors import InconsistentGroupProtocol

JOIN = {
    "group_id": "shared",
    "session_timeout": 10000,
    "rebalance_timeout": 10000,
    "member_id": "",
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"}],
}


def test_a_group_is_one_namespace_across_http_and_kafka(kafka: KafkaGateway) -> None:
    groups = kafka.gw.broker.groups
    kafka.gw.broker.create_topic("t")
    http_member = groups.join("shared", topics=["t"])
    with connect(kafka) as s:  # a Kafka member cannot join a group HTTP members hold
        s.sendall(frame(11, 5, JOIN))
        assert response(11, 5, read_frame(s)).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    groups.leave("shared", http_member.member_id)
    with connect(kafka) as s:  # ... and the other way round
        s.sendall(frame(11, 5, JOIN))
        joined = response(11, 5, read_frame(s))
        assert joined.error_code == 0 and joined.leader == joined.member_id
        with pytest.raises(InconsistentGroupProtocol):
            groups.join("shared", topics=["t"])
        with pytest.raises(InconsistentGroupProtocol):
            groups.commit("shared", None, -1, {("t", 0): 0})


def test_log_append_time_topics(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    p.produce("lat", value=b"x", timestamp=1_000_000_000_000)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "lat", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["lat"])
        msg = None
        for _ in range(100):
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None
        kind, stamp = msg.timestamp()
        assert kind == 2 and stamp >= before  # TIMESTAMP_LOG_APPEND_TIME, the broker's clock
    finally:
        c.close()
    rec = kafka.gw.client.get("/v1/topics/lat/partitions/0/records", params={"offset": 0}).json()["records"][
        0
    ]
    assert rec["timestamp"] == stamp and rec["timestamp_type"] == "LogAppendTime"


def test_a_silent_member_expires_and_the_live_one_gets_its_partitions(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("t", partitions=2)
    silent = {**JOIN, "group_id": "exp", "session_timeout": 1000, "rebalance_timeout": 1000}
    with connect(kafka) as s:  # joins, syncs, then never heartbeats again
        s.sendall(frame(11, 5, silent))
        joined = response(11, 5, read_frame(s))
        sync = {
            "group_id": "exp",
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "assignments": [{"member_id": joined.member_id, "assignment": b""}],
        }
        s.sendall(frame(14, 3, sync))
        assert response(14, 3, read_frame(s)).error_code == 0
        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "exp", "session.timeout.ms": 6000})
        try:
            c.subscribe(["t"])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(c.assignment()) < 2:
                c.poll(0.1)
            assert sorted(tp.partition for tp in c.assignment()) == [0, 1]
        finally:
            c.close()


def test_a_group_is_classic_or_consumer_at_a_time(kafka: KafkaGateway) -> None:
    """KIP-848: a consumer-protocol member holds the group against classic and HTTP joins, a classic
    member against consumer-protocol heartbeats; once empty, the group may change protocol."""
    groups = kafka.gw.broker.groups
    kafka.gw.broker.create_topic("t")
    beat = {"group_id": "shared", "member_id": "k1", "member_epoch": 0, "rebalance_timeout": 30000}
    beat |= {"subscribed_topic_names": ["t"], "topic_partitions": []}
    with connect(kafka) as s:
        s.sendall(frame(68, 1, beat))
        joined = response(68, 1, read_frame(s))
        assert joined.error_code == 0 and joined.member_epoch > 0 and joined.member_id == "k1"
        s.sendall(frame(11, 5, JOIN))
        assert response(11, 5, read_frame(s)).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        with pytest.raises(InconsistentGroupProtocol):
            groups.join("shared", topics=["t"])
        s.sendall(frame(68, 1, {**beat, "member_epoch": -1, "subscribed_topic_names": None}))
        assert response(68, 1, read_frame(s)).error_code == 0  # left: the group is empty
        s.sendall(frame(11, 5, JOIN))
        assert response(11, 5, read_frame(s)).error_code == 0  # classic now
        s.sendall(frame(68, 1, {**beat, "member_id": "k2"}))
        assert response(68, 1, read_frame(s)).error_code == 69  # GROUP_ID_NOT_FOUND: a classic group
