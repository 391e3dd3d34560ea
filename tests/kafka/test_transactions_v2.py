"""Transaction version 2 (KIP-890 part 2) over the wire, request by request (the Java 4.x client's own run is
in test_java_transactions.py): ApiVersions finalizes ``transaction.version`` 2; Produce v12 and
TxnOffsetCommit v5 add their partition and group implicitly; EndTxn v5 bumps the epoch and answers it, a
retried EndTxn succeeds again, and a late Produce or EndTxn of the ended transaction is fenced instead of
landing in the next one; the broker setting turns it all off (the classic versions only)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from gateway_harness import start_gateway, stop_gateway, table_rows
from kafka_harness import KafkaGateway, frame, read_frame, response

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow

INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
PRODUCER_FENCED = 90


@pytest.fixture(scope="module")
def kafka(module_kafka: KafkaGateway) -> KafkaGateway:
    """The module's one gateway (transaction version 2, the default)."""
    return module_kafka


def _rpc(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame(api_key, version, body))
        return response(api_key, version, read_frame(s))


def _batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, seq, 1 << 20)  # transactional
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000, None, v, [])
    return bytes(b.build())


def _produce(port: int, version: int, tid: str, topic: str, batches: dict[int, bytes]) -> dict[int, int]:
    data = [{"index": p, "records": b} for p, b in batches.items()]
    body = {
        "transactional_id": tid,
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": data}],
    }
    answer = _rpc(port, 0, version, body)
    return {int(p.index): int(p.error_code) for p in answer.responses[0].partition_responses}


def _end(port: int, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    ids = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    answer = _rpc(port, 26, 5, ids)
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def _versions(port: int, version: int = 4) -> Any:
    return _rpc(port, 18, version, {"client_software_name": "t", "client_software_version": "1"})


def test_api_versions_finalize_transaction_version_2(kafka: KafkaGateway) -> None:
    v4 = _versions(kafka.port)
    spans = {k.api_key: (k.min_version, k.max_version) for k in v4.api_keys}
    assert (spans[0][1], spans[26][1], spans[28][1]) == (12, 5, 5)
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features] == [
        ("transaction.version", 2, 2)
    ]
    assert v4.finalized_features_epoch == 2
    assert [(f.name, f.max_version) for f in v4.supported_features] == [("transaction.version", 2)]
    v3 = _versions(kafka.port, 3)  # features whose minimum is 0 are left out of v3's supported list
    assert not v3.supported_features and v3.finalized_features_epoch == 2


def test_implicit_adds_epoch_bumps_and_late_requests_fenced(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("tv2", partitions=2)
    tid, port = "tid-v2", kafka.port
    init = _rpc(
        port,
        22,
        4,
        {"transactional_id": tid, "transaction_timeout": 30_000, "producer_id": -1, "producer_epoch": -1},
    )
    pid, e = int(init.producer_id), int(init.producer_epoch)
    # Produce v12 adds its partitions (no AddPartitionsToTxn); TxnOffsetCommit v5 its group
    assert _produce(port, 12, tid, "tv2", {0: _batch(pid, e, 0, b"a", b"b"), 1: _batch(pid, e, 0, b"c")}) == {
        0: 0,
        1: 0,
    }
    offsets = {
        "transactional_id": tid,
        "group_id": "g-v2",
        "producer_id": pid,
        "producer_epoch": e,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "tv2",
                "partitions": [{"partition_index": 0, "committed_offset": 2, "committed_metadata": ""}],
            }
        ],
    }
    assert _rpc(port, 28, 5, offsets).topics[0].partitions[0].error_code == 0
    assert table_rows(kafka.gw, "tv2").num_rows == 0  # held until the commit
    assert _end(port, tid, pid, e, commit=True) == (0, pid, e + 1)  # committed, the epoch bumped
    assert _end(port, tid, pid, e, commit=True) == (0, pid, e + 1)  # a retry: the same answer
    assert _end(port, tid, pid, e, commit=False)[0] == INVALID_TXN_STATE  # not how it ended
    assert kafka.gw.broker.groups.committed("g-v2")[("tv2", 0)].offset == 2
    # a late batch of the committed transaction is fenced, not held in the next one (KAFKA-17754)
    assert _produce(port, 12, tid, "tv2", {0: _batch(pid, e, 1, b"late")}) == {0: INVALID_PRODUCER_EPOCH}
    assert _produce(port, 12, tid, "tv2", {1: _batch(pid, e + 1, 0, b"next")}) == {1: 0}
    # a delayed EndTxn of the previous transaction does not commit the next one (Jepsen's case)
    assert _end(port, tid, pid, e, commit=True)[0] == PRODUCER_FENCED
    (desc,) = _rpc(port, 65, 0, {"transactional_ids": [tid]}).transaction_states
    assert (desc.transaction_state, desc.producer_epoch) == ("Ongoing", e + 1)
    assert _end(port, tid, pid, e + 1, commit=False) == (0, pid, e + 2)  # aborted, bumped again
    assert _end(port, tid, pid, e + 2, commit=False) == (0, pid, e + 3)  # an empty abort bumps too
    assert _end(port, tid, pid, e + 3, commit=True)[0] == INVALID_TXN_STATE  # a commit of nothing
    # the classic protocol on the same broker is unchanged: v9 needs AddPartitionsToTxn
    assert _produce(port, 9, tid, "tv2", {0: _batch(pid, e + 3, 0, b"v9")}) == {0: INVALID_TXN_STATE}
    rows = table_rows(kafka.gw, "tv2")
    got = sorted(
        zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), rows["value"].to_pylist(), strict=True)
    )
    assert got == [(0, 0, b"a"), (0, 1, b"b"), (1, 0, b"c")]


def test_the_setting_turns_transaction_version_2_off(tmp_path: Path) -> None:
    port = free_port()
    gw, server, thread = start_gateway(tmp_path / "wh", kafka_port=port, transaction_version=0)
    try:
        v4 = _versions(port)
        spans = {k.api_key: (k.min_version, k.max_version) for k in v4.api_keys}
        assert (spans[0][1], spans[26][1], spans[28][1]) == (9, 3, 3)
        assert not v4.finalized_features and v4.finalized_features_epoch == -1
        gw.broker.create_topic("off", partitions=1)
        data = [{"name": "off", "partition_data": [{"index": 0, "records": _batch(1, 0, 0, b"x")}]}]
        body = {"transactional_id": "tid-off", "acks": -1, "timeout": 5000, "topic_data": data}
        assert not _rpc(port, 0, 12, body).responses  # refused as a version it does not serve
        assert table_rows(gw, "off").num_rows == 0
    finally:
        stop_gateway(gw, server, thread)
