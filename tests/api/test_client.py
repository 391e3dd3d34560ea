"""topiclake.client against a real gateway: every call of the native API, and errors as their classes."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import orjson
import pyarrow as pa
import pytest
from gateway_harness import Gateway, table_rows

from topiclake import errors
from topiclake.client import GatewayUnavailable, TopiclakeClient, decode_bytes, error_from_body
from topiclake.process.ports import free_port


@pytest.fixture
def tl(gateway: Gateway) -> Iterator[TopiclakeClient]:
    with TopiclakeClient(gateway.url, timeout=10) as client:
        yield client


def test_topic_admin_round_trip(tl: TopiclakeClient) -> None:
    created = tl.create_topic("orders", partitions=2, configs={"retention.ms": 3_600_000})
    assert created["name"] == "orders" and created["partitions"] == 2
    assert created["configs"]["retention.ms"] == "3600000"
    assert [t["name"] for t in tl.list_topics()] == ["orders"]
    altered = tl.alter_topic_configs("orders", {"cleanup.policy": "compact"}, ["retention.ms"])
    assert altered["configs"]["cleanup.policy"] == "compact"
    assert altered["configs"]["retention.ms"] == "604800000"  # back to the default
    grown = tl.increase_partitions("orders", 5)
    assert grown["partitions"] == 5
    described = tl.describe_topic("orders")
    assert [o["partition"] for o in described["offsets"]] == [0, 1, 2, 3, 4]
    assert all(o["beginning_offset"] == o["end_offset"] == 0 for o in described["offsets"])
    meta = tl.metadata()
    assert meta["brokers"][0]["port"] == int(tl.url.rsplit(":", 1)[1])
    assert [len(t["partitions"]) for t in meta["topics"] if t["name"] == "orders"] == [5]
    tl.delete_topic("orders")
    assert tl.list_topics() == []


def test_errors_come_back_as_their_classes(tl: TopiclakeClient) -> None:
    tl.create_topic("t")
    with pytest.raises(errors.TopicExists) as exists:
        tl.create_topic("t")
    assert exists.value.code == "topic_exists" and "t" in exists.value.message
    with pytest.raises(errors.InvalidConfig):
        tl.create_topic("u", configs={"retention.ms": "soon"})
    with pytest.raises(errors.InvalidTopicName):
        tl.create_topic("a/b")
    with pytest.raises(errors.InvalidPartitions):
        tl.increase_partitions("t", 1)
    with pytest.raises(errors.TopicNotFound):
        tl.describe_topic("missing")
    with pytest.raises(errors.PartitionNotFound):
        tl.fetch("t", 3, 0)
    with pytest.raises(errors.OffsetOutOfRange) as oor:
        tl.fetch("t", 0, 5)
    assert oor.value.details["high_watermark"] == 0 and oor.value.details["log_start_offset"] == 0
    with pytest.raises(errors.InvalidRequest) as bad:  # a FastAPI validation error (no such class)
        tl.produce("t", [])
    assert bad.value.code == "invalid_request"


def test_produce_and_fetch_in_each_encoding(gateway: Gateway, tl: TopiclakeClient) -> None:
    tl.create_topic("t", partitions=2)
    answer = tl.produce(
        "t",
        [
            {"key": "k", "value": {"n": 1}, "headers": {"h": "v"}},
            {"key": None, "value": [1, 2], "partition": 1, "timestamp": 1_700_000_000_000},
            {"value": 3, "partition": 7},
        ],
    )
    first, second, bad = answer["results"]
    assert first["error"] is None and second == {
        "partition": 1,
        "offset": 0,
        "timestamp": 1_700_000_000_000,
        "error": None,
    }
    assert bad["error"] is not None and bad["error"]["code"] == "partition_not_found"
    p = first["partition"]
    assert p is not None
    got = tl.fetch("t", p, 0)
    (rec,) = got["records"]
    assert decode_bytes(rec["key"]) == b"k" and orjson.loads(decode_bytes(rec["value"]) or b"") == {"n": 1}
    assert rec["headers"] == [{"key": "h", "value": base64.b64encode(b"v").decode()}]
    assert got["next_offset"] == got["high_watermark"] == 1
    as_json = tl.fetch("t", 1, 0, encoding="json")
    assert (
        as_json["records"][0]["value"] == [1, 2] and as_json["records"][0]["timestamp"] == 1_700_000_000_000
    )
    raw = base64.b64encode(b"\x00\xff").decode()
    tl.produce("t", [{"value": raw}], partition=1, encoding="binary", acks="1")
    tl.produce("t", [{"value": "plain"}], partition=1, encoding="string", acks=0)
    deadline = time.monotonic() + 10
    while tl.offsets("t", 1)["end_offset"] < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    values = [decode_bytes(r["value"]) for r in tl.fetch("t", 1, 1)["records"]]
    assert values == [b"\x00\xff", b"plain"]
    assert table_rows(gateway, "t").num_rows == 4


def test_ndjson_stream_and_arrow(tl: TopiclakeClient) -> None:
    tl.create_topic("t")
    lines: list[dict[str, object] | str] = [{"key": f"k{i}", "value": i} for i in range(200)]
    lines[50] = "{not json"
    results = list(tl.produce_stream("t", lines))
    assert len(results) == 200
    assert results[50]["error"] is not None and results[50]["error"]["code"] == "invalid_record"
    offsets = [r["offset"] for r in results if r["error"] is None]
    assert offsets == list(range(199))
    table = pa.table({"key": pa.nulls(3, pa.binary()), "value": pa.array([b"a", b"b", b"c"], pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    answer = tl.produce_arrow("t", 0, sink.getvalue().to_pybytes())
    assert answer == {"topic": "t", "partition": 0, "base_offset": 199, "count": 3}
    back = pa.ipc.open_stream(tl.fetch_arrow("t", 0, 199)).read_all()
    assert back["value"].to_pylist() == [b"a", b"b", b"c"] and back["offset"].to_pylist() == [199, 200, 201]


def test_offsets_by_time_long_poll_and_idempotent_producer(tl: TopiclakeClient) -> None:
    tl.create_topic("t")
    tl.produce("t", [{"value": i, "timestamp": 1000 * (i + 1)} for i in range(5)])
    assert tl.offsets("t", 0, timestamp=2500) == {
        "topic": "t",
        "partition": 0,
        "beginning_offset": 0,
        "end_offset": 5,
        "timestamp": 2500,
        "timestamp_offset": 2,
    }
    assert tl.offsets("t", 0, timestamp=10**13)["timestamp_offset"] is None
    started = time.monotonic()
    empty = tl.fetch("t", 0, 5, wait_ms=300)
    assert empty["records"] == [] and time.monotonic() - started >= 0.25
    producer = tl.init_producer()
    batch = [{"value": "once"}]
    seq = {"id": producer["producer_id"], "epoch": producer["epoch"], "sequence": 0}
    first = tl.produce("t", batch, producer=seq)
    assert tl.produce("t", batch, producer=seq) == first
    assert tl.offsets("t", 0)["end_offset"] == 6
    with pytest.raises(errors.OutOfOrderSequence):
        tl.produce("t", batch, producer={**seq, "sequence": 9})


def test_unreachable_gateway_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with TopiclakeClient(url, timeout=2) as tl, pytest.raises(GatewayUnavailable) as exc:
        tl.list_topics()
    assert f"is `topiclake serve` running at {url}?" in exc.value.message
    assert exc.value.retriable and isinstance(exc.value, errors.TopiclakeError)


def test_error_bodies_are_rebuilt_faithfully() -> None:
    body = orjson.dumps({"error": {"code": "throttled", "message": "slow down", "retriable": True}})
    throttled = error_from_body(429, body, retry_after="2")
    assert isinstance(throttled, errors.Throttled) and throttled.retry_after_ms == 2000
    unknown = error_from_body(500, orjson.dumps({"error": {"code": "internal", "message": "boom"}}))
    assert type(unknown) is errors.TopiclakeError and unknown.code == "internal" and unknown.message == "boom"
    oor = error_from_body(
        416,
        orjson.dumps(
            {"error": {"code": "offset_out_of_range", "message": "m", "details": {"high_watermark": 3}}}
        ),
    )
    assert isinstance(oor, errors.OffsetOutOfRange) and oor.details == {"high_watermark": 3}
    proxy = error_from_body(502, b"<html>Bad Gateway</html>")
    assert type(proxy) is errors.TopiclakeError and proxy.retriable and "HTTP 502" in proxy.message
