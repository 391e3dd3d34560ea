"""Confluent REST Proxy v2 end to end: a real uvicorn server, records checked in the Delta table."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from deltalake import DeltaTable
from gateway_harness import Gateway, stop_gateway, table_version

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Storage, partition_for_key
from topiclake.process.ports import free_port
from topiclake.settings import GatewaySettings

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def _post(gw: Gateway, path: str, body: Any, ctype: str = JSON_V2, accept: str = V2) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return gw.client.post(path, content=content, headers={"Content-Type": ctype, "Accept": accept})


def _rows(gw: Gateway, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes | None]]:
    t = DeltaTable(gw.storage.topic_uri(topic)).to_pyarrow_table(
        columns=["partition", "offset", "key", "value"]
    )
    d = t.to_pydict()
    return {
        (p, o): (k, v) for p, o, k, v in zip(d["partition"], d["offset"], d["key"], d["value"], strict=True)
    }


_version = table_version


def _assert_error(r: httpx.Response, status: int, code: int) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error_code", "message"}
    assert body["error_code"] == code
    assert body["message"]


# ------------------------------------------------------------------ metadata


def test_root_brokers_and_topic_list(gateway: Gateway) -> None:
    gateway.broker.create_topic("a")
    gateway.broker.create_topic("b", partitions=2)
    r = gateway.client.get("/", headers={"Accept": V2})
    assert r.status_code == 200 and r.json() == {}
    assert r.headers["content-type"] == V2
    assert gateway.client.get("/brokers").json() == {"brokers": [gateway.broker.config.broker_id]}
    assert sorted(gateway.client.get("/topics").json()) == ["a", "b"]


def test_topic_partitions_and_offsets_shapes(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=3, configs={"cleanup.policy": "compact"})
    leader = gateway.broker.config.broker_id
    replica = {"broker": leader, "leader": True, "in_sync": True}
    r = gateway.client.get("/topics/t", headers={"Accept": "application/vnd.kafka+json"})
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == "t"
    assert body["configs"]["cleanup.policy"] == "compact"
    assert body["configs"]["retention.ms"] == "604800000"
    assert all(isinstance(v, str) for v in body["configs"].values())
    assert body["partitions"] == [{"partition": p, "leader": leader, "replicas": [replica]} for p in range(3)]
    assert gateway.client.get("/topics/t/partitions").json() == body["partitions"]
    assert gateway.client.get("/topics/t/partitions/2").json() == body["partitions"][2]
    assert gateway.client.get("/topics/t/partitions/1/offsets").json() == {
        "beginning_offset": 0,
        "end_offset": 0,
    }
    _post(gateway, "/topics/t/partitions/1", {"records": [{"value": 1}, {"value": 2}]})
    assert gateway.client.get("/topics/t/partitions/1/offsets").json() == {
        "beginning_offset": 0,
        "end_offset": 2,
    }


def test_get_unknown_topic_and_partition(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    for path in ("/topics/nope", "/topics/nope/partitions", "/topics/nope/partitions/0/offsets"):
        _assert_error(gateway.client.get(path), 404, 40401)
    for path in ("/topics/t/partitions/2", "/topics/t/partitions/-1", "/topics/t/partitions/x/offsets"):
        _assert_error(gateway.client.get(path), 404, 40402)


def test_bad_accept_is_406(gateway: Gateway) -> None:
    gateway.broker.create_topic("t")
    _assert_error(gateway.client.get("/topics", headers={"Accept": "text/html"}), 406, 406)
    version = _version(gateway, "t")
    _assert_error(_post(gateway, "/topics/t", {"records": [{"value": 1}]}, accept="text/csv"), 406, 406)
    assert _version(gateway, "t") == version
    for ok in ("application/json", "application/vnd.kafka+json", "*/*", f"text/html;q=0.5, {V2}"):
        assert gateway.client.get("/topics", headers={"Accept": ok}).status_code == 200


# ------------------------------------------------------------------ produce


def test_produce_json_lands_in_table(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=4)
    records = [
        {"key": "somekey", "value": {"foo": "bar"}},
        {"value": ["foo", "bar"], "partition": 1},
        {"value": 53.5},
        {"key": {"id": 7}, "value": None},
    ]
    r = _post(gateway, "/topics/t", {"records": records})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == V2
    body = r.json()
    assert body["key_schema_id"] is None and body["value_schema_id"] is None
    offsets = body["offsets"]
    assert len(offsets) == 4
    assert all(o["error_code"] is None and o["error"] is None for o in offsets)
    assert offsets[0]["partition"] == partition_for_key(b'"somekey"', 4)
    assert offsets[1]["partition"] == 1
    assert offsets[3]["partition"] == partition_for_key(b'{"id":7}', 4)
    rows = _rows(gateway, "t")
    expected = [
        (b'"somekey"', b'{"foo":"bar"}'),
        (None, b'["foo","bar"]'),
        (None, b"53.5"),
        (b'{"id":7}', None),
    ]
    for o, want in zip(offsets, expected, strict=True):
        assert rows[(o["partition"], o["offset"])] == want


def test_produce_binary_lands_in_table(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=3)
    raw = [(b"key", b"\x00\xffconfluent"), (None, b"kafka"), (b"k2", b"")]
    records: list[dict[str, Any]] = [
        {"key": None if k is None else base64.b64encode(k).decode(), "value": base64.b64encode(v).decode()}
        for k, v in raw
    ]
    for ctype in (BINARY_V2, V2):  # Confluent: no embedded format means binary
        r = _post(gateway, "/topics/t", {"records": records}, ctype=ctype)
        assert r.status_code == 200, r.text
        rows = _rows(gateway, "t")
        offsets = r.json()["offsets"]
        assert offsets[0]["partition"] == partition_for_key(b"key", 3)
        for o, want in zip(offsets, raw, strict=True):
            assert rows[(o["partition"], o["offset"])] == want


def test_produce_to_partition(strict_gateway: Gateway) -> None:
    strict_gateway.broker.create_topic("t", partitions=3)
    body = {"records": [{"key": "a2V5", "value": "Y29uZmx1ZW50"}, {"value": "a2Fma2E=", "partition": 0}]}
    r = _post(strict_gateway, "/topics/t/partitions/2", body, ctype=BINARY_V2)
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    assert [(o["partition"], o["offset"]) for o in offsets] == [(2, 0), (2, 1)]
    rows = _rows(strict_gateway, "t")
    assert rows[(2, 0)] == (b"key", b"confluent")
    assert rows[(2, 1)] == (None, b"kafka")
    _assert_error(_post(strict_gateway, "/topics/t/partitions/3", body, ctype=BINARY_V2), 404, 40402)
    _assert_error(_post(strict_gateway, "/topics/t/partitions/x", body, ctype=BINARY_V2), 404, 40402)
    _assert_error(_post(strict_gateway, "/topics/nope/partitions/0", body, ctype=BINARY_V2), 404, 40401)


def test_per_record_errors_leave_others_written(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2, configs={"max.message.bytes": "100"})
    records = [
        {"value": "ok-1", "partition": 0},
        {"value": "x" * 200},
        {"value": "ok-2", "partition": 5},
        {"value": "ok-3", "partition": 1},
    ]
    r = _post(gateway, "/topics/t", {"records": records})
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    for bad in (offsets[1], offsets[2]):
        assert bad["partition"] is None and bad["offset"] is None
        assert bad["error_code"] == 50002  # Confluent: non-retriable Kafka exception
        assert bad["error"]
    assert "max.message.bytes" in offsets[1]["error"]
    rows = _rows(gateway, "t")
    assert rows[(0, offsets[0]["offset"])] == (None, b'"ok-1"')
    assert rows[(1, offsets[3]["offset"])] == (None, b'"ok-3"')
    assert len(rows) == 2


@pytest.mark.parametrize(
    ("ctype", "body", "status", "code"),
    [
        ("text/plain", b'{"records":[{"value":1}]}', 415, 415),
        ("application/vnd.kafka.avro.v2+json", b'{"records":[{"value":1}]}', 422, 42202),
        ("application/vnd.kafka.protobuf.v2+json", b'{"records":[{"value":1}]}', 422, 42202),
        ("application/vnd.kafka.jsonschema.v2+json", b'{"records":[{"value":1}]}', 422, 42202),
        (JSON_V2, b'{"records": [{"value": 1}', 400, 400),
        (JSON_V2, b"[1, 2]", 400, 400),
        (JSON_V2, b'{"records": "nope"}', 400, 400),
        (JSON_V2, b'{"records": [1]}', 400, 400),
        (JSON_V2, b'{"records": [{"value": 1, "partition": "zero"}]}', 400, 400),
        (BINARY_V2, b'{"records": [{"value": "aGVsbG8=="}]}', 400, 400),
        (BINARY_V2, b'{"records": [{"value": "ok=="}, {"value": "not base64!"}]}', 400, 400),
        (BINARY_V2, b'{"records": [{"key": 12, "value": "aGVsbG8="}]}', 400, 400),
        (JSON_V2, b'{"records": []}', 422, 422),
        (JSON_V2, b"{}", 422, 422),
    ],
)
def test_bad_produce_requests_write_nothing(
    gateway: Gateway, ctype: str, body: bytes, status: int, code: int
) -> None:
    gateway.broker.create_topic("t")
    _post(gateway, "/topics/t", {"records": [{"value": 0}]})
    version = _version(gateway, "t")
    _assert_error(_post(gateway, "/topics/t", body, ctype=ctype), status, code)
    _assert_error(_post(gateway, "/topics/t/partitions/0", body, ctype=ctype), status, code)
    assert _version(gateway, "t") == version
    assert len(_rows(gateway, "t")) == 1


def test_unknown_topic_and_path_traversal(strict_gateway: Gateway, tmp_path: Path) -> None:
    strict_gateway.broker.create_topic("a")
    version = _version(strict_gateway, "a")
    body = {"records": [{"value": 1}]}
    _assert_error(_post(strict_gateway, "/topics/nope", body), 404, 40401)
    for path in ("/topics/..%2Fx", "/topics/a%2Fb", "/topics/..%2F..%2Fa", "/topics/a%2F..%2F..%2Fa"):
        r = _post(strict_gateway, path, body)
        assert r.status_code == 404, (path, r.text)
        assert set(r.json()) == {"error_code", "message"}
        assert strict_gateway.client.get(path).status_code == 404
    for name in ("%2E%2E", "a%20b", "a%00b"):
        _assert_error(_post(strict_gateway, f"/topics/{name}", body), 404, 40401)
        _assert_error(strict_gateway.client.get(f"/topics/{name}"), 404, 40401)
    assert _version(strict_gateway, "a") == version
    assert not (tmp_path / "x").exists()
    assert strict_gateway.client.get("/topics").json() == ["a"]


# ------------------------------------------------------------------ body limit


@pytest.fixture
def small_gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway whose request bodies are limited to 1 KiB."""
    port = free_port()
    config = BrokerConfig(linger_ms=1.0)
    settings = GatewaySettings(
        warehouse=str(tmp_path / "wh"), host="127.0.0.1", port=port, broker=config, max_request_bytes=1024
    )
    broker = Broker(Storage(str(tmp_path / "wh")), config)
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, broker=broker), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("gateway did not start")
        threading.Event().wait(0.02)
    url = f"http://127.0.0.1:{port}"
    gw = Gateway(url, broker, broker.storage, httpx.Client(base_url=url, timeout=30))
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)


def test_oversized_body_is_413(small_gateway: Gateway) -> None:
    small_gateway.broker.create_topic("t")
    version = _version(small_gateway, "t")
    body = {"records": [{"value": "x" * 2000}]}
    _assert_error(_post(small_gateway, "/topics/t", body), 413, 41301)
    assert _version(small_gateway, "t") == version
    assert _post(small_gateway, "/topics/t", {"records": [{"value": "x"}]}).status_code == 200
