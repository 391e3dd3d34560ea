"""The listener on the wire: exact ApiVersions, KIP-511, bad frames close only their connection, per-partition
errors, acks=0, and a clear error for a taken port."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

import pytest
from gateway_harness import table_rows
from kafka_harness import HELLO, KafkaGateway, connect, frame, read_frame, response

from topiclake.kafka import SUPPORTED, KafkaListener, KafkaListenerError
from topiclake.platform import Broker, Storage
from topiclake.process.ports import free_port


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionError, TimeoutError):
        return True


def test_api_versions_advertises_exactly_what_is_implemented(kafka: KafkaGateway) -> None:
    with connect(kafka) as s:
        s.sendall(frame(18, 3, HELLO))
        resp = response(18, 3, read_frame(s))
        assert resp.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == SUPPORTED
        # KIP-511: a newer ApiVersions than we know is answered in v0 with UNSUPPORTED_VERSION and our list
        newer = bytearray(frame(18, 3, HELLO))
        struct.pack_into(">h", newer, 6, 99)
        s.sendall(bytes(newer))
        v0 = response(18, 0, read_frame(s))
        assert v0.error_code == 35 and len(v0.api_keys) == len(SUPPORTED)


def test_bad_frames_close_only_their_connection(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("t")
    ok = connect(kafka)
    try:
        bad_cases = [
            struct.pack(">i", 2**30) + b"\0" * 16,  # oversized
            struct.pack(">ihhi", 8, 1000, 0, 1),  # unknown api key
            struct.pack(">ihhi", 8, 3, 12, 1),  # Metadata v12 header cut short
            struct.pack(">i", 50) + b"\0" * 10,  # truncated: the client goes away mid-request
        ]
        for raw in bad_cases:
            with connect(kafka) as s:
                s.sendall(raw)
                if raw is not bad_cases[-1]:
                    assert _closed(s)
        # the other connection and the broker are unharmed
        ok.sendall(frame(3, 12, {"topics": None, "allow_auto_topic_creation": False}))
        md = response(3, 12, read_frame(ok))
        assert [t.name for t in md.topics] == ["t"] and md.topics[0].partitions[0].leader_id == 0
    finally:
        ok.close()


def test_unsupported_version_of_a_known_api_gets_an_answer(kafka: KafkaGateway) -> None:
    with connect(kafka) as s:
        s.sendall(frame(3, 13, {"topics": None}))  # Metadata v13: kio knows it, we do not advertise it
        resp = response(3, 13, read_frame(s))
        assert resp.error_code == 35


def test_corrupt_batch_is_refused_per_partition_and_acks_zero_has_no_answer(kafka: KafkaGateway) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    kafka.gw.broker.create_topic("t", partitions=2)
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    b.append(0, 1_700_000_000_000, b"k", b"v", [])
    good = bytes(b.build())
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # CRC no longer matches
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [{"index": 0, "records": good}, {"index": 1, "records": bytes(bad)}],
            },
            {"name": "missing", "partition_data": [{"index": 0, "records": good}]},
        ],
    }
    with connect(kafka) as s:
        s.sendall(frame(0, 9, body))
        resp = response(0, 9, read_frame(s))
        codes = {(t.name, p.index): p.error_code for t in resp.responses for p in t.partition_responses}
        assert codes == {("t", 0): 0, ("t", 1): 2, ("missing", 0): 3}  # ok, CORRUPT_MESSAGE, UNKNOWN_TOPIC
        s.sendall(frame(0, 9, {**body, "acks": 0, "topic_data": body["topic_data"][:1]}, correlation_id=8))
        s.sendall(
            frame(18, 3, {"client_software_name": "t", "client_software_version": "1"}, correlation_id=9)
        )
        nxt = read_frame(s)
        assert struct.unpack_from(">i", nxt)[0] == 9  # acks=0 got no answer; the next request did
    deadline = time.monotonic() + 10
    while table_rows(kafka.gw, "t").num_rows < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = table_rows(kafka.gw, "t")  # the good batch of each request, the corrupt one never
    assert rows["value"].to_pylist() == [b"v", b"v"] and rows["partition"].to_pylist() == [0, 0]


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken, Broker(Storage(str(tmp_path / "wh"))) as broker:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        listener = KafkaListener(broker, "127.0.0.1", port)
        with pytest.raises(KafkaListenerError, match="already in use"):
            asyncio.run(listener.start())


def test_idempotent_retries_are_answered_with_the_original_offset_and_zombies_fenced(
    kafka: KafkaGateway,
) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    kafka.gw.broker.create_topic("t", partitions=2)

    def batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
        b = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
        b.append(0, 1_700_000_000_000, None, value, [])
        return bytes(b.build())

    with connect(kafka) as s:
        s.sendall(
            frame(
                22,
                4,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
        )
        init = response(22, 4, read_frame(s))
        pid, epoch = init.producer_id, init.producer_epoch
        assert init.error_code == 0 and pid >= 0 and epoch == 0

        def produce(partition: int, seq: int, value: bytes, ep: int = 0) -> tuple[int, int]:
            data = {
                "name": "t",
                "partition_data": [{"index": partition, "records": batch(pid, ep, seq, value)}],
            }
            s.sendall(frame(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [data]}))
            p = response(0, 9, read_frame(s)).responses[0].partition_responses[0]
            return int(p.error_code), int(p.base_offset)

        assert produce(0, 0, b"a") == (0, 0)
        assert produce(1, 0, b"b") == (0, 0)  # sequences are per partition
        assert produce(0, 0, b"a") == (0, 0)  # a retry: the original offset, not a second row
        assert produce(0, 1, b"c") == (0, 1)
        assert produce(0, 5, b"gap")[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        s.sendall(
            frame(
                22,
                4,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60000,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                },
            )
        )
        bumped = response(22, 4, read_frame(s))
        assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
        assert produce(0, 0, b"new epoch", ep=1) == (0, 2)
        assert produce(0, 2, b"zombie", ep=0)[0] == 47  # INVALID_PRODUCER_EPOCH
    assert table_rows(kafka.gw, "t").num_rows == 4


def test_pipelined_idempotent_batches_keep_their_order(kafka: KafkaGateway) -> None:
    """A client pipelines a partition's batches (sequences 0, 10, 20, ...) on one connection: each is
    appended in request order (no OUT_OF_ORDER_SEQUENCE_NUMBER) while their commits overlap."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    kafka.gw.broker.create_topic("p")
    pid = kafka.gw.broker.init_producer().producer_id
    frames = []
    for k in range(20):
        b = DefaultRecordBatchBuilder(2, 0, 0, pid, 0, 10 * k, 1 << 20)
        for i in range(10):
            b.append(i, 1_700_000_000_000, None, b"%d" % (10 * k + i), [])
        data = {"name": "p", "partition_data": [{"index": 0, "records": bytes(b.build())}]}
        frames.append(frame(0, 9, {"acks": -1, "timeout": 10000, "topic_data": [data]}, correlation_id=k))
    with connect(kafka) as s:
        s.sendall(b"".join(frames))
        answers = [response(0, 9, read_frame(s)).responses[0].partition_responses[0] for _ in frames]
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 10 * k) for k in range(20)]
    values = table_rows(kafka.gw, "p")["value"].to_pylist()
    assert values == [b"%d" % i for i in range(200)]
