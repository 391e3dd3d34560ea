"""Every produce answer carries the timestamp the log stored: CreateTime as sent or defaulted, or
LogAppendTime -- never null -- on the native (fast path, general path, ndjson stream), v2 and v3 routes."""

from __future__ import annotations

import base64
import time
from datetime import datetime

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from gateway_harness import Gateway

from topiclake.platform import Record

SENT = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def stored(gateway: Gateway, topic: str) -> dict[tuple[int, int], int]:
    """(partition, offset) -> timestamp in ms of every committed record of the topic."""
    out: dict[tuple[int, int], int] = {}
    for p in range(gateway.broker.describe_topic(topic).partitions):
        batch = gateway.broker.fetch(topic, p, 0, max_records=10_000).records
        ms = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
        for off, ts in zip(batch["offset"].to_pylist(), ms, strict=True):
            out[(p, off)] = ts
    return out


def check(gateway: Gateway, topic: str, answers: list[tuple[int, int, int]], before: int) -> None:
    """Each (partition, offset, timestamp) answered is the record's stored timestamp."""
    table = stored(gateway, topic)
    assert answers
    for partition, offset, ts in answers:
        assert ts is not None
        assert table[(partition, offset)] == ts
        assert ts == SENT or before <= ts <= int(time.time() * 1000)


def test_native_answers_carry_sent_and_defaulted_create_times(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    before = int(time.time() * 1000)
    records = [{"key": "a", "value": 1, "timestamp": SENT}, {"key": "b", "value": 2}]
    for acks in ("all", "1"):
        r = gateway.client.post(f"/v1/topics/t/records?acks={acks}", json={"records": records})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert results[0]["timestamp"] == SENT
        assert results[1]["timestamp"] is not None and results[1]["timestamp"] >= before
    answers = [(x["partition"], x["offset"], x["timestamp"]) for x in results]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(stored(gateway, "t")) < 4:
        time.sleep(0.05)
    check(gateway, "t", answers, before)


def test_native_acks_0_answer_carries_the_timestamp(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=1)
    r = gateway.client.post(
        "/v1/topics/t/records?acks=0", json={"records": [{"value": 1, "timestamp": SENT}]}
    )
    assert r.json()["results"][0]["timestamp"] == SENT


def test_native_log_append_time_topic_answers_the_append_time(gateway: Gateway) -> None:
    gateway.client.post(
        "/v1/topics",
        json={"name": "lat", "partitions": 1, "configs": {"message.timestamp.type": "LogAppendTime"}},
    )
    before = int(time.time() * 1000)
    r = gateway.client.post("/v1/topics/lat/records", json={"records": [{"value": 1, "timestamp": SENT}]})
    res = r.json()["results"][0]
    assert res["timestamp"] != SENT and res["timestamp"] >= before
    check(gateway, "lat", [(res["partition"], res["offset"], res["timestamp"])], before)


def test_native_general_path_and_stream_carry_timestamps(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=1)
    before = int(time.time() * 1000)
    # binary encoding takes the general (non-fast) path
    body = {"records": [{"value": base64.b64encode(b"x").decode()}, {"value": None, "timestamp": SENT}]}
    r = gateway.client.post("/v1/topics/t/records?encoding=binary", json=body)
    assert r.status_code == 200, r.text
    general = r.json()["results"]
    lines = b"\n".join(orjson.dumps({"value": i}) for i in range(3)) + b"\n"
    r = gateway.client.post(
        "/v1/topics/t/records", content=lines, headers={"content-type": "application/x-ndjson"}
    )
    assert r.status_code == 200, r.text
    streamed = [orjson.loads(line) for line in r.content.splitlines() if line.strip()]
    assert len(streamed) == 3
    answers = [(x["partition"], x["offset"], x["timestamp"]) for x in general + streamed]
    assert general[1]["timestamp"] == SENT
    check(gateway, "t", answers, before)


def test_idempotent_retry_answers_the_original_timestamps(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=1)
    pid = gateway.client.post("/v1/producers").json()["producer_id"]
    body = {"records": [{"value": 1}], "producer": {"id": pid, "epoch": 0, "sequence": 0}}
    first = gateway.client.post("/v1/topics/t/records", json=body).json()["results"]
    gateway.broker.produce("t", [Record(value=b"later")])  # the original is now found in the table
    retry = gateway.client.post("/v1/topics/t/records", json=body).json()["results"]
    assert first[0]["timestamp"] is not None
    assert retry == first


def test_v2_answers_carry_timestamps(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=1)
    before = int(time.time() * 1000)
    r = gateway.client.post(
        "/topics/t",
        json={"records": [{"value": {"a": 1}}, {"value": {"a": 2}, "partition": 0}]},
        headers={"content-type": "application/vnd.kafka.json.v2+json"},
    )
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    check(gateway, "t", [(o["partition"], o["offset"], o["timestamp"]) for o in offsets], before)


def test_v3_answers_carry_timestamps(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=1)
    cluster = gateway.client.get("/v3/clusters").json()["data"][0]["cluster_id"]
    before = int(time.time() * 1000)
    answers = []
    for doc in (
        {"value": {"type": "JSON", "data": 1}},
        {"value": {"type": "JSON", "data": 2}, "timestamp": "2026-01-01T00:00:00Z"},
    ):
        r = gateway.client.post(f"/v3/clusters/{cluster}/topics/t/records", json=doc)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["timestamp"] is not None
        ms = int(datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
        answers.append((body["partition_id"], body["offset"], ms))
    assert answers[1][2] == SENT
    check(gateway, "t", answers, before)
