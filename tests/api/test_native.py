"""The native /v1 API end to end: a real uvicorn server, the Delta tables checked with delta-rs."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from gateway_harness import Gateway, start_gateway, stop_gateway, table_rows, table_version

from topiclake.platform import partition_for_key

ARROW = "application/vnd.apache.arrow.stream"


def test_topic_admin_lifecycle(gateway: Gateway) -> None:
    c = gateway.client
    r = c.post("/v1/topics", json={"name": "orders", "partitions": 2, "configs": {"retention.ms": "3600000"}})
    assert r.status_code == 201, r.text
    assert r.json()["configs"]["retention.ms"] == "3600000"
    assert Path(gateway.storage.topic_uri("orders"), "_delta_log").is_dir()
    assert [t["name"] for t in c.get("/v1/topics").json()["topics"]] == ["orders"]
    r = c.patch(
        "/v1/topics/orders/configs", json={"set": {"cleanup.policy": "compact"}, "delete": ["retention.ms"]}
    )
    assert r.json()["configs"]["cleanup.policy"] == "compact"
    assert r.json()["configs"]["retention.ms"] == "604800000"
    assert c.post("/v1/topics/orders/partitions", json={"count": 3}).json()["partitions"] == 3
    parts = c.get("/v1/topics/orders/partitions").json()["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2] and all(p["leader"] == 0 for p in parts)
    meta = c.get("/v1/metadata").json()
    assert meta["brokers"][0]["id"] == 0 and meta["topics"][0]["name"] == "orders"
    assert c.delete("/v1/topics/orders").status_code == 204
    assert c.get("/v1/topics/orders").status_code == 404
    assert not Path(gateway.storage.topic_uri("orders")).exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "../etc", "partitions": 1}, 400, "invalid_topic_name"),
        ({"name": "a/b"}, 400, "invalid_topic_name"),
        ({"name": "x" * 250}, 400, "invalid_topic_name"),
        ({"name": "ok", "configs": {"retention.mss": "1"}}, 400, "invalid_config"),
        ({"name": "ok", "configs": {"retention.ms": "soon"}}, 400, "invalid_config"),
        ({"name": "ok", "partitions": 0}, 400, "invalid_partitions"),
        ({"name": "ok", "partitions": "many"}, 422, "invalid_request"),
        ({"nom": "ok"}, 422, "invalid_request"),
    ],
)
def test_bad_topic_requests_are_clear_and_create_nothing(
    gateway: Gateway, body: dict[str, object], status: int, code: str
) -> None:
    r = gateway.client.post("/v1/topics", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]
    assert gateway.client.get("/v1/topics").json()["topics"] == []
    assert not Path(gateway.storage.root, "topics").exists() or not any(
        Path(gateway.storage.root, "topics").iterdir()
    )


def test_produce_json_is_in_the_table_when_answered(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=3)
    records = [{"key": f"k{i}", "value": {"n": i}, "headers": {"src": "test"}} for i in range(100)]
    r = gateway.client.post("/v1/topics/t/records", json={"records": records})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    rows = table_rows(gateway, "t")
    by_pos = {
        (p, o): (k, v, h)
        for p, o, k, v, h in zip(
            *(rows[c].to_pylist() for c in ("partition", "offset", "key", "value", "headers")), strict=True
        )
    }
    for rec, res in zip(records, results, strict=True):
        key, value, headers = by_pos[(res["partition"], res["offset"])]
        assert key == rec["key"].encode() and value == orjson.dumps(rec["value"])  # string keys as text
        assert res["partition"] == partition_for_key(key, 3)  # where Kafka's Java client puts it
        assert headers == [{"key": "src", "value": b"test"}]
    assert len(by_pos) == 100


def test_encodings_and_per_record_errors(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", configs={"max.message.bytes": "200"})
    c = gateway.client
    r = c.post(
        "/v1/topics/t/records?encoding=binary",
        json={
            "records": [
                {"value": base64.b64encode(b"\x00\xff").decode()},
                {"value": "***not base64"},
                {"value": "QUJD"},
            ]
        },
    )
    res = r.json()["results"]
    assert [x["error"]["code"] if x["error"] else None for x in res] == [None, "invalid_record", None]
    r = c.post(
        "/v1/topics/t/records?encoding=string", json={"records": [{"value": "x" * 500}, {"value": "fits"}]}
    )
    res = r.json()["results"]
    assert res[0]["error"]["code"] == "record_too_large" and res[1]["offset"] == 2
    values = table_rows(gateway, "t")["value"].to_pylist()
    assert values == [b"\x00\xff", b"ABC", b"fits"]
    got = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0, "encoding": "string"}).json()
    assert [rec["value"] for rec in got["records"]][1:] == ["ABC", "fits"]
    assert got["next_offset"] == 3 and got["high_watermark"] == 3 and got["log_start_offset"] == 0


def test_acks_one_and_zero(gateway: Gateway) -> None:
    gateway.broker.create_topic("t")
    r1 = gateway.client.post("/v1/topics/t/records?acks=1", json={"records": [{"value": 1}]}).json()
    assert r1["results"][0]["offset"] == 0
    r0 = gateway.client.post("/v1/topics/t/records?acks=0", json={"records": [{"value": 2}]}).json()
    assert r0["results"][0]["offset"] is None
    got = gateway.client.get(
        "/v1/topics/t/partitions/0/records", params={"offset": 0, "wait_ms": 2000}
    ).json()
    deadline = time.monotonic() + 5
    while got["high_watermark"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        got = gateway.client.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()
    assert got["high_watermark"] == 2
    assert (
        gateway.client.post("/v1/topics/t/records?acks=2", json={"records": [{"value": 3}]}).status_code
        == 422
    )


def test_ndjson_stream_answers_in_order_with_group_commit(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    before = table_version(gateway, "t")

    def lines() -> Iterator[bytes]:
        for i in range(300):
            yield orjson.dumps({"key": f"k{i % 7}", "value": i}) + b"\n"
            if i == 150:
                yield b"{broken\n"

    r = gateway.client.post(
        "/v1/topics/t/records", content=lines(), headers={"content-type": "application/x-ndjson"}
    )
    assert r.status_code == 200
    results = [orjson.loads(line) for line in r.text.splitlines()]
    assert len(results) == 301
    assert results[151]["error"]["code"] == "invalid_record"
    good = [x for x in results if x["error"] is None]
    assert len(good) == 300
    rows = table_rows(gateway, "t")
    assert rows.num_rows == 300
    assert sorted(orjson.loads(v) for v in rows["value"].to_pylist()) == list(range(300))
    commits = table_version(gateway, "t") - before
    assert commits < 300  # records arriving together share a Delta commit


def test_arrow_produce_and_fetch(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    table = pa.table(
        {"key": pa.array([b"a", None, b"c"], pa.binary()), "value": pa.array([b"1", b"2", b"3"], pa.binary())}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    body = sink.getvalue().to_pybytes()
    r = gateway.client.post("/v1/topics/t/records?partition=1", content=body, headers={"content-type": ARROW})
    assert r.json() == {"topic": "t", "partition": 1, "base_offset": 0, "count": 3}
    assert (
        gateway.client.post("/v1/topics/t/records", content=body, headers={"content-type": ARROW}).status_code
        == 422
    )
    bad = gateway.client.post(
        "/v1/topics/t/records?partition=1", content=b"nope", headers={"content-type": ARROW}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_arrow"
    got = gateway.client.get(
        "/v1/topics/t/partitions/1/records", params={"offset": 1}, headers={"accept": ARROW}
    )
    fetched = pa.ipc.open_stream(got.content).read_all()
    assert fetched["value"].to_pylist() == [b"2", b"3"] and fetched["offset"].to_pylist() == [1, 2]
    assert got.headers["x-topiclake-next-offset"] == "3"
    assert (
        gateway.client.get(
            "/v1/topics/t/partitions/1/records", params={"offset": 0}, headers={"accept": "text/csv"}
        ).status_code
        == 406
    )


def test_fetch_long_poll_limits_and_ranges(gateway: Gateway) -> None:
    gateway.broker.create_topic("t")
    c = gateway.client
    timer = threading.Timer(
        0.3, lambda: c.post("/v1/topics/t/records", json={"records": [{"value": "late"}]})
    )
    timer.start()
    started = time.monotonic()
    got = c.get(
        "/v1/topics/t/partitions/0/records", params={"offset": 0, "wait_ms": 10_000, "encoding": "json"}
    ).json()
    timer.join()
    assert got["records"][0]["value"] == "late"
    assert time.monotonic() - started < 8  # answered on arrival
    c.post("/v1/topics/t/records?encoding=string", json={"records": [{"value": "x" * 5000}] * 3})
    one = c.get("/v1/topics/t/partitions/0/records", params={"offset": 1, "max_bytes": 10}).json()
    assert len(one["records"]) == 1  # at least one record even if larger than max_bytes
    far = c.get("/v1/topics/t/partitions/0/records", params={"offset": 99})
    assert far.status_code == 416 and far.json()["error"]["details"]["high_watermark"] == 4
    assert c.get("/v1/topics/t/partitions/0/records", params={"offset": -1}).status_code == 416
    assert (
        c.get("/v1/topics/t/partitions/5/records", params={"offset": 0}).json()["error"]["code"]
        == "partition_not_found"
    )
    assert c.get("/v1/topics/nope/partitions/0/records", params={"offset": 0}).status_code == 404
    assert c.get("/v1/topics/t/partitions/0/records").status_code == 422  # offset is required
    offsets = c.get("/v1/topics/t/partitions/0/offsets", params={"timestamp": 0}).json()
    assert (
        offsets["beginning_offset"] == 0 and offsets["end_offset"] == 4 and offsets["timestamp_offset"] == 0
    )


def test_idempotent_producer_over_http(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    pid = gateway.client.post("/v1/producers").json()["producer_id"]
    body = {
        "records": [{"key": "a", "value": 1}, {"key": "b", "value": 2}],
        "producer": {"id": pid, "epoch": 0, "sequence": 0},
    }
    first = gateway.client.post("/v1/topics/t/records", json=body).json()["results"]
    retry = gateway.client.post("/v1/topics/t/records", json=body).json()["results"]
    assert retry == first
    assert table_rows(gateway, "t").num_rows == 2
    gap = gateway.client.post(
        "/v1/topics/t/records", json={**body, "producer": {"id": pid, "epoch": 0, "sequence": 7}}
    )
    assert gap.status_code == 409 and gap.json()["error"]["code"] == "out_of_order_sequence"


@pytest.mark.parametrize(
    ("path", "kwargs", "status"),
    [
        (
            "/v1/topics/t/records",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
        ),
        ("/v1/topics/t/records", {"content": b"a,b", "headers": {"content-type": "text/csv"}}, 415),
        ("/v1/topics/t/records", {"json": {"records": []}}, 422),
        ("/v1/topics/t/records", {"json": {"rec": []}}, 422),
        ("/v1/topics/t/records", {"json": [1, 2]}, 422),
        ("/v1/topics/t/records?encoding=rot13", {"json": {"records": [{"value": 1}]}}, 422),
        ("/v1/topics/t/records?partition=9", {"json": {"records": [{"value": 1}]}}, 404),
        ("/v1/topics/..%2F..%2Fetc/records", {"json": {"records": [{"value": 1}]}}, 404),
        ("/v1/topics/%2E%2E/records", {"json": {"records": [{"value": 1}]}}, 400),
        ("/v1/topics/a%20b/records", {"json": {"records": [{"value": 1}]}}, 400),
        ("/v1/topics/missing/records", {"json": {"records": [{"value": 1}]}}, 404),
        ("/v1/topics/t/records", {"json": {"records": [{"value": 1, "partition": "one"}]}}, 200),
        ("/v1/topics/t/records", {"json": {"records": [{"value": 1, "headers": "h"}]}}, 200),
    ],
)
def test_bad_produce_input_is_a_clear_error_and_loses_nothing(
    strict_gateway: Gateway, path: str, kwargs: dict[str, object], status: int
) -> None:
    strict_gateway.broker.create_topic("t")
    strict_gateway.client.post("/v1/topics/t/records", json={"records": [{"value": "before"}]})
    version = table_version(strict_gateway, "t")
    r = strict_gateway.client.post(path, **kwargs)  # type: ignore[arg-type]
    assert r.status_code == status, r.text
    body = r.json()
    if status != 200:
        assert body["error"]["code"] and body["error"]["message"]
    else:
        assert body["results"][0]["error"]["code"] == "invalid_record"
    assert table_version(strict_gateway, "t") == version
    assert table_rows(strict_gateway, "t")["value"].to_pylist() == [b'"before"']


def test_oversized_body_is_refused(tmp_path: Path) -> None:
    gw, server, thread = start_gateway(tmp_path / "wh")
    try:
        gw.broker.create_topic("t")
        huge = b'{"records": [{"value": "' + b"x" * (70 * 1024 * 1024) + b'"}]}'
        r = gw.client.post("/v1/topics/t/records", content=huge, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert DeltaTable(gw.storage.topic_uri("t")).to_pyarrow_table().num_rows == 0
    finally:
        stop_gateway(gw, server, thread)


def test_load_beyond_the_buffers_is_throttled_and_nothing_accepted_is_dropped(tmp_path: Path) -> None:
    gw, server, thread = start_gateway(tmp_path / "wh", linger_ms=200.0, buffer_max_bytes=64 * 1024)
    try:
        gw.broker.create_topic("t", partitions=2)
        accepted: list[tuple[int, int, bytes]] = []
        throttled = 0
        lock = threading.Lock()

        def client(n: int) -> None:
            nonlocal throttled
            with httpx.Client(base_url=gw.url, timeout=30) as c:
                for i in range(15):
                    value = f"{n}-{i}-" + "v" * 2000
                    r = c.post(
                        "/v1/topics/t/records?encoding=string&acks=1",
                        json={"records": [{"value": value}] * 5},
                    )
                    with lock:
                        if r.status_code == 429:
                            throttled += 1
                            assert int(r.headers["retry-after"]) >= 1
                            assert r.json()["error"]["retriable"] is True
                        else:
                            assert r.status_code == 200, r.text
                            for res in r.json()["results"]:
                                accepted.append((res["partition"], res["offset"], value.encode()))
                    assert (
                        gw.broker.budget.used <= 64 * 1024 + 5 * 2100
                    )  # bounded (one request may overshoot)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert throttled > 0
        deadline = time.monotonic() + 10
        while gw.broker.budget.used and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = table_rows(gw, "t")
        stored = set(
            zip(
                rows["partition"].to_pylist(),
                rows["offset"].to_pylist(),
                rows["value"].to_pylist(),
                strict=True,
            )
        )
        assert set(accepted) <= stored and len(stored) == len(accepted)
    finally:
        stop_gateway(gw, server, thread)


def test_metrics_and_openapi(gateway: Gateway) -> None:
    gateway.broker.create_topic("t")
    gateway.client.post("/v1/topics/t/records", json={"records": [{"value": 1}, {"value": 2}]})
    gateway.client.get("/v1/topics/t/partitions/0/records", params={"offset": 0})
    text = gateway.client.get("/metrics").text
    assert 'topiclake_partition_end_offset{partition="0",topic="t"} 2.0' in text
    assert 'topiclake_produced_records_total{topic="t"} 2.0' in text
    assert (
        "topiclake_produce_latency_seconds_bucket" in text and "topiclake_fetch_latency_seconds_count" in text
    )
    assert 'route="/v1/topics/{topic}/records"' in text
    for _ in range(2):  # the log is open now: served by the front door, which counts them itself
        gateway.client.post("/v1/topics/t/records", json={"records": [{"value": 3}]})
    text = gateway.client.get("/metrics").text
    line = 'topiclake_http_requests_total{method="POST",route="/v1/topics/{topic}/records",status="200"}'
    assert f"{line} 3.0" in text
    assert 'topiclake_produced_records_total{topic="t"} 4.0' in text
    # what the commits did: three commits (acks=all, one after the other) of 4 records in all
    assert 'topiclake_topic_committed_records_total{topic="t"} 4.0' in text
    assert 'topiclake_topic_commit_latency_seconds_count{topic="t"} 3.0' in text
    assert 'topiclake_topic_commit_latency_seconds_bucket{le="+Inf",topic="t"} 3.0' in text
    # the topic's maintenance rounds, a histogram whose last bucket holds them all
    rounds = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("topiclake_topic_maintenance_round_seconds_") and 'topic="t"' in line
    }
    name = "topiclake_topic_maintenance_round_seconds"
    everything, fast = (
        rounds[f'{name}_bucket{{le="+Inf",topic="t"}}'],
        rounds[f'{name}_bucket{{le="0.01",topic="t"}}'],
    )
    assert rounds[f'{name}_count{{topic="t"}}'] == everything >= fast, rounds
    spec = gateway.client.get("/openapi.json").json()
    produce = spec["paths"]["/v1/topics/{topic}/records"]["post"]
    assert "example" in produce["requestBody"]["content"]["application/json"]
    assert "/v1/topics/{topic}/partitions/{partition}/records" in spec["paths"]


def test_huge_headers_count_against_the_record_limit(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", configs={"max.message.bytes": "10000"})
    big = {
        "records": [
            {"value": "ok", "headers": {"h": "x" * 20_000}},
            {"value": "ok", "headers": {"h": "small"}},
        ]
    }
    res = gateway.client.post("/v1/topics/t/records?encoding=string", json=big).json()["results"]
    assert res[0]["error"]["code"] == "record_too_large" and res[1]["offset"] == 0
    many = {
        "records": [{"value": "dg==", "headers": [{"key": f"k{i}", "value": "eA=="} for i in range(5000)]}]
    }
    res = gateway.client.post("/v1/topics/t/records?encoding=binary", json=many).json()["results"]
    assert res[0]["error"]["code"] == "record_too_large"
    rows = table_rows(gateway, "t")
    assert rows.num_rows == 1 and rows["headers"].to_pylist() == [[{"key": "h", "value": b"small"}]]


def test_ndjson_to_an_unknown_topic_is_a_404(strict_gateway: Gateway) -> None:
    r = strict_gateway.client.post(
        "/v1/topics/nope/records", content=b'{"value": 1}\n', headers={"content-type": "application/x-ndjson"}
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "topic_not_found"


def test_arrow_produce_on_the_event_loop_answers_as_the_route(gateway: Gateway) -> None:
    """Once the topic's log is open, an Arrow body is screened and queued without a worker thread
    (fast_produce); acks, errors and the answer are those of the documented route."""
    gateway.broker.create_topic("t", partitions=2)
    calls: list[int | None] = []
    start = gateway.broker.start_arrow

    def counted(*args: Any, **kwargs: Any) -> Any:
        handle = start(*args, **kwargs)
        calls.append(None if handle is None else handle.parts[0][1])
        return handle

    gateway.broker.start_arrow = counted  # type: ignore[method-assign]

    def post(values: list[bytes], acks: str) -> httpx.Response:
        sink = pa.BufferOutputStream()
        table = pa.table({"value": pa.array(values, pa.binary())})
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return gateway.client.post(
            f"/v1/topics/t/records?partition=1&acks={acks}",
            content=sink.getvalue().to_pybytes(),
            headers={"content-type": ARROW},
        )

    assert post([b"a"], "all").json()["base_offset"] == 0  # opens the log (the route, if not open yet)
    assert post([b"b", b"c"], "all").json() == {"topic": "t", "partition": 1, "base_offset": 1, "count": 2}
    assert post([b"d"], "1").json()["base_offset"] == 3
    assert post([b"e"], "0").json() == {"topic": "t", "partition": 1, "base_offset": None, "count": 1}
    assert calls[-3:] == [1, 3, 4]  # served on the loop
    too_large = post([b"x" * 2_000_000], "all")
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "record_too_large"
    assert post([b"f"], "all").json()["base_offset"] == 5  # commits follow each other: "e" is in
    got = gateway.client.get(
        "/v1/topics/t/partitions/1/records", params={"offset": 0}, headers={"accept": ARROW}
    )
    assert pa.ipc.open_stream(got.content).read_all()["value"].to_pylist() == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
        b"f",
    ]
