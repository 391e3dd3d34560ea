"""Confluent Kafka REST Proxy v3 end to end: a real gateway, checked against the Delta tables themselves."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable

if TYPE_CHECKING:
    from tests.api.conftest import Gateway

JSON = {"Content-Type": "application/json"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def cid(gw: Gateway) -> str:
    return gw.broker.cluster_id


def topics_url(gw: Gateway) -> str:
    return f"/v3/clusters/{cid(gw)}/topics"


def make_topic(gw: Gateway, name: str, partitions: int = 1, **configs: str) -> None:
    body = {
        "topic_name": name,
        "partitions_count": partitions,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
    }
    r = gw.client.post(topics_url(gw), json=body)
    assert r.status_code == 201, r.text


def table(gw: Gateway, topic: str) -> pa.Table:
    return DeltaTable(gw.storage.topic_uri(topic)).to_pyarrow_table().sort_by("offset")


def reports(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def produce(gw: Gateway, topic: str, record: dict[str, Any]) -> dict[str, Any]:
    r = gw.client.post(f"{topics_url(gw)}/{topic}/records", json=record)
    assert r.status_code == 200, r.text
    (report,) = reports(r)
    return report


# ---------------------------------------------------------------------------------------------- clusters


def test_clusters_and_links(gateway: Gateway) -> None:
    r = gateway.client.get("/v3/clusters")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["kind"] == "KafkaClusterList"
    (cluster,) = body["data"]
    c = cid(gateway)
    assert cluster["cluster_id"] == c
    assert cluster["metadata"]["self"] == f"{gateway.url}/v3/clusters/{c}"
    assert cluster["metadata"]["resource_name"] == f"crn:///kafka={c}"
    bid = gateway.broker.config.broker_id
    assert cluster["controller"]["related"] == f"{gateway.url}/v3/clusters/{c}/brokers/{bid}"
    for rel, suffix in [
        ("acls", "acls"),
        ("brokers", "brokers"),
        ("broker_configs", "broker-configs"),
        ("consumer_groups", "consumer-groups"),
        ("topics", "topics"),
        ("partition_reassignments", "topics/-/partitions/-/reassignment"),
    ]:
        assert cluster[rel]["related"] == f"{gateway.url}/v3/clusters/{c}/{suffix}"
    assert gateway.client.get(f"/v3/clusters/{c}").json() == cluster
    broker = gateway.client.get(cluster["controller"]["related"]).json()
    assert broker["kind"] == "KafkaBroker" and broker["broker_id"] == bid


def test_unknown_cluster_is_404_everywhere(gateway: Gateway) -> None:
    make_topic(gateway, "t")
    for method, path in [
        ("GET", "/v3/clusters/nope"),
        ("GET", "/v3/clusters/nope/topics"),
        ("GET", "/v3/clusters/nope/topics/t/partitions"),
        ("POST", "/v3/clusters/nope/topics/t/records"),
    ]:
        r = gateway.client.request(method, path, json={"value": {"type": "JSON", "data": 1}})
        assert r.status_code == 404, path
        assert r.json() == {"error_code": 404, "message": "Cluster nope cannot be found."}
    assert table(gateway, "t").num_rows == 0


# ---------------------------------------------------------------------------------------------- topics


def test_topic_lifecycle(gateway: Gateway) -> None:
    gw, c = gateway, cid(gateway)
    body = {
        "topic_name": "orders",
        "partitions_count": 3,
        "replication_factor": 1,
        "configs": [
            {"name": "retention.ms", "value": "3600000"},
            {"name": "cleanup.policy", "value": "compact"},
        ],
    }
    r = gw.client.post(topics_url(gw), json=body)
    assert r.status_code == 201, r.text
    topic = r.json()
    assert r.headers["location"] == topic["metadata"]["self"] == f"{gw.url}/v3/clusters/{c}/topics/orders"
    assert topic["kind"] == "KafkaTopic"
    assert (
        topic["partitions_count"] == 3 and topic["replication_factor"] == 1 and topic["is_internal"] is False
    )
    assert topic["configs"]["related"] == f"{gw.url}/v3/clusters/{c}/topics/orders/configs"
    # in the catalog and a Delta table
    info = gw.broker.describe_topic("orders")
    assert info.partitions == 3
    assert info.config.retention_ms == 3_600_000 and info.config.cleanup_policy == "compact"
    assert gw.storage.is_table(gw.storage.topic_uri("orders"))
    # listed and readable
    names = [t["topic_name"] for t in gw.client.get(topics_url(gw)).json()["data"]]
    assert names == ["orders"]
    assert gw.client.get(f"{topics_url(gw)}/orders").json() == topic
    # configs
    configs = gw.client.get(f"{topics_url(gw)}/orders/configs").json()
    assert configs["kind"] == "KafkaTopicConfigList"
    by_name = {cfg["name"]: cfg for cfg in configs["data"]}
    assert by_name["retention.ms"]["value"] == "3600000"
    assert (
        by_name["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
        and not by_name["retention.ms"]["is_default"]
    )
    assert by_name["segment.ms"]["is_default"] and by_name["segment.ms"]["source"] == "DEFAULT_CONFIG"
    one = gw.client.get(f"{topics_url(gw)}/orders/configs/retention.ms").json()
    assert one == by_name["retention.ms"]
    assert [s["source"] for s in one["synonyms"]] == ["DYNAMIC_TOPIC_CONFIG", "DEFAULT_CONFIG"]
    # alter one, reset one
    r = gw.client.put(f"{topics_url(gw)}/orders/configs/retention.ms", json={"value": "7200000"})
    assert r.status_code == 204, r.text
    assert gw.broker.describe_topic("orders").config.retention_ms == 7_200_000
    r = gw.client.delete(f"{topics_url(gw)}/orders/configs/cleanup.policy")
    assert r.status_code == 204, r.text
    assert gw.broker.describe_topic("orders").config.cleanup_policy == "delete"
    # batch alter, dry run first
    batch = {
        "data": [
            {"name": "retention.ms", "operation": "DELETE"},
            {"name": "max.message.bytes", "value": "2048"},
        ]
    }
    r = gw.client.post(f"{topics_url(gw)}/orders/configs:alter", json={**batch, "validate_only": True})
    assert r.status_code == 204
    assert gw.broker.describe_topic("orders").config.retention_ms == 7_200_000
    r = gw.client.post(f"{topics_url(gw)}/orders/configs:alter", json=batch)
    assert r.status_code == 204, r.text
    cfg = gw.broker.describe_topic("orders").config
    assert cfg.retention_ms == 604_800_000 and cfg.max_message_bytes == 2048
    # partitions
    parts = gw.client.get(f"{topics_url(gw)}/orders/partitions").json()
    assert parts["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in parts["data"]] == [0, 1, 2]
    p1 = gw.client.get(f"{topics_url(gw)}/orders/partitions/1").json()
    base = f"{gw.url}/v3/clusters/{c}/topics/orders/partitions/1"
    bid = gw.broker.config.broker_id
    assert p1["leader"]["related"] == f"{base}/replicas/{bid}"
    assert p1["replicas"]["related"] == f"{base}/replicas"
    assert p1["reassignment"]["related"] == f"{base}/reassignment"
    leader = gw.client.get(p1["leader"]["related"]).json()
    assert leader["is_leader"] is True and leader["broker_id"] == bid
    # grow
    r = gw.client.patch(f"{topics_url(gw)}/orders", json={"partitions_count": 4})
    assert r.status_code == 200 and r.json()["partitions_count"] == 4
    assert gw.broker.describe_topic("orders").partitions == 4
    r = gw.client.patch(f"{topics_url(gw)}/orders", json={"partitions_count": 2})
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    # delete
    r = gw.client.delete(f"{topics_url(gw)}/orders")
    assert r.status_code == 204
    assert gw.client.get(f"{topics_url(gw)}/orders").status_code == 404
    assert not gw.storage.is_table(gw.storage.topic_uri("orders"))
    assert gw.client.get(topics_url(gw)).json()["data"] == []


def test_create_validate_only_and_errors(gateway: Gateway) -> None:
    gw = gateway
    r = gw.client.post(
        topics_url(gw), json={"topic_name": "dry", "partitions_count": 2, "validate_only": True}
    )
    assert r.status_code == 200 and r.json()["partitions_count"] == 2
    assert gw.broker.list_topics() == []
    make_topic(gw, "dup")
    r = gw.client.post(topics_url(gw), json={"topic_name": "dup"})
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    r = gw.client.post(topics_url(gw), json={"topic_name": "dup", "validate_only": True})
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    for bad in [
        {"topic_name": "x", "partitions_count": "all"},
        {"topic_name": 5},
        {"partitions_count": 1},
    ]:
        r = gw.client.post(topics_url(gw), json=bad)
        assert r.status_code == 400 and r.json()["error_code"] == 400, bad
    r = gw.client.post(
        topics_url(gw), json={"topic_name": "x", "configs": [{"name": "retention.ms", "value": "soon"}]}
    )
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    r = gw.client.post(
        topics_url(gw), json={"topic_name": "x", "configs": [{"name": "no.such", "value": "1"}]}
    )
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    for name in ["../escape", "a/b", "..", "has space", "x" * 250]:
        r = gw.client.post(topics_url(gw), json={"topic_name": name})
        assert r.status_code == 400 and r.json()["error_code"] == 40002, name
    assert [t.name for t in gw.broker.list_topics()] == ["dup"]
    r = gw.client.post(topics_url(gw), content=b"{not json", headers=JSON)
    assert r.status_code == 400 and r.json()["error_code"] == 400
    r = gw.client.post(topics_url(gw), content=b'{"topic_name": "y"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["error_code"] == 415
    r = gw.client.get(topics_url(gw), headers={"Accept": "application/xml"})
    assert r.status_code == 406 and r.json()["error_code"] == 40601


def test_unknown_topic_partition_and_config(gateway: Gateway) -> None:
    gw = gateway
    make_topic(gw, "known", partitions=2)
    for path in [
        "/missing",
        "/missing/configs",
        "/missing/partitions",
        "/known/partitions/2",
        "/known/partitions/-1",
        "/known/partitions/x",
    ]:
        r = gw.client.get(topics_url(gw) + path)
        assert r.status_code == 404, path
        assert r.json()["error_code"] == 40403, path
    assert gw.client.delete(f"{topics_url(gw)}/missing").json()["error_code"] == 40403
    r = gw.client.get(f"{topics_url(gw)}/known/configs/no.such.config")
    assert r.status_code == 404 and r.json()["error_code"] == 404
    r = gw.client.put(f"{topics_url(gw)}/known/configs/retention.ms", json={"value": "-5"})
    assert r.status_code == 400 and r.json()["error_code"] == 40002
    r = gw.client.get(f"{topics_url(gw)}/%2e%2e")
    assert r.status_code in (400, 404) and r.json()["error_code"] in (40002, 404)


# ---------------------------------------------------------------------------------------------- produce


def test_produce_each_type(gateway: Gateway) -> None:
    gw, c = gateway, cid(gateway)
    make_topic(gw, "events", partitions=3)
    rep = produce(
        gw,
        "events",
        {
            "key": {"type": "BINARY", "data": b64(b"\x00\x01k")},
            "value": {"type": "BINARY", "data": b64(b"\xffv")},
        },
    )
    assert rep["error_code"] == 200 and rep["cluster_id"] == c and rep["topic_name"] == "events"
    assert rep["key"] == {"type": "BINARY", "size": 3} and rep["value"] == {"type": "BINARY", "size": 2}
    assert rep["timestamp"].endswith("Z")
    rep_json = produce(gw, "events", {"value": {"type": "JSON", "data": {"a": [1, 2]}}, "partition_id": 2})
    assert rep_json["partition_id"] == 2 and rep_json["offset"] == 0 and "key" not in rep_json
    rep_str = produce(
        gw,
        "events",
        {
            "partition_id": 1,
            "key": {"type": "STRING", "data": "k1"},
            "value": {"type": "STRING", "data": "héllo"},
            "headers": [{"name": "h1", "value": b64(b"v1")}, {"name": "h2", "value": None}],
            "timestamp": "2021-02-05T19:14:42.5Z",
        },
    )
    assert rep_str["partition_id"] == 1 and rep_str["timestamp"] == "2021-02-05T19:14:42.500Z"
    t = table(gw, "events")
    rows = {(r["partition"], r["offset"]): r for r in t.to_pylist()}
    assert len(rows) == 3
    first = rows[(rep["partition_id"], rep["offset"])]
    assert first["key"] == b"\x00\x01k" and first["value"] == b"\xffv"
    assert json.loads(rows[(2, 0)]["value"]) == {"a": [1, 2]}
    third = rows[(1, rep_str["offset"])]
    assert third["key"] == b"k1" and third["value"] == "héllo".encode()
    assert [(h["key"], h["value"]) for h in third["headers"]] == [("h1", b"v1"), ("h2", None)]
    assert third["timestamp"].timestamp() == pytest.approx(1612552482.5)


def test_produce_lowercase_type_and_header_key_variant(gateway: Gateway) -> None:
    make_topic(gateway, "lenient")
    rep = produce(
        gateway,
        "lenient",
        {"value": {"type": "json", "data": 7}, "headers": [{"key": "k", "value": b64(b"x")}]},
    )
    assert rep["error_code"] == 200 and rep["value"]["type"] == "JSON"
    (row,) = table(gateway, "lenient").to_pylist()
    assert row["value"] == b"7" and row["headers"][0]["key"] == "k"


def _stream(records: list[bytes], chunk: int = 3) -> Iterator[bytes]:
    for i in range(0, len(records), chunk):
        yield b"".join(records[i : i + chunk])


def test_streaming_mode_group_commits_in_order(gateway: Gateway) -> None:
    gw = gateway
    make_topic(gw, "stream", partitions=2)
    n = 200
    records = [
        json.dumps(
            {"key": {"type": "STRING", "data": f"k{i % 7}"}, "value": {"type": "JSON", "data": {"i": i}}}
        ).encode()
        for i in range(n)
    ]
    # concatenated JSON with no separator at all, sent in chunks that split objects anywhere
    body = b"".join(records)
    chunks = [body[i : i + 97] for i in range(0, len(body), 97)]
    r = gw.client.post(f"{topics_url(gw)}/stream/records", content=iter(chunks), headers=JSON)
    assert r.status_code == 200
    assert "chunked" in r.request.headers.get("transfer-encoding", "")
    got = reports(r)
    assert len(got) == n and all(g["error_code"] == 200 for g in got)
    t = table(gw, "stream")
    assert t.num_rows == n
    values = {(row["partition"], row["offset"]): json.loads(row["value"])["i"] for row in t.to_pylist()}
    # every report points at its own record, and each record is in the table exactly once
    assert [values[(g["partition_id"], g["offset"])] for g in got] == list(range(n))
    assert sorted(values.values()) == list(range(n))
    dt = DeltaTable(gw.storage.topic_uri("stream"))
    appends = [h for h in dt.history() if h.get("operation") == "WRITE"]
    assert len(appends) < n // 2, f"{len(appends)} commits for {n} records"


def test_streaming_newline_delimited_and_bad_records_in_the_middle(gateway: Gateway) -> None:
    gw = gateway
    make_topic(gw, "mixed", max_message_bytes="1000")
    lines = [json.dumps({"value": {"type": "JSON", "data": i}}).encode() for i in range(10)]
    lines[2] = b'{"value": {"type": "BINARY", "data": "not base64!!"}}'
    lines[4] = b'{"value": {"type": "JSON", "data": }}'  # balanced braces, invalid JSON
    lines[5] = b'{"value": {"type": "AVRO", "data": 1}}'
    lines[6] = b'{"partition_id": 9, "value": {"type": "JSON", "data": 6}}'
    lines[7] = json.dumps({"value": {"type": "STRING", "data": "x" * 5000}}).encode()
    lines[8] = b'{"value": {"type": "STRING", "data": 8}}'
    r = gw.client.post(
        f"{topics_url(gw)}/mixed/records", content=_stream([ln + b"\n" for ln in lines]), headers=JSON
    )
    assert r.status_code == 200
    got = reports(r)
    # [5]: AVRO without a schema id, and the topic's value subject has no schema: 40401
    assert [g["error_code"] for g in got] == [200, 200, 400, 200, 400, 40401, 40402, 41301, 400, 200]
    assert all("message" in g for g in got if g["error_code"] != 200)
    rows = table(gw, "mixed").to_pylist()
    assert [json.loads(row["value"]) for row in rows] == [0, 1, 3, 9]
    assert [row["offset"] for row in rows] == [0, 1, 2, 3]
    assert [g["offset"] for g in got if g["error_code"] == 200] == [0, 1, 2, 3]


def test_stream_with_broken_framing_keeps_what_came_before(gateway: Gateway) -> None:
    gw = gateway
    make_topic(gw, "framing")
    body = b'{"value": {"type": "JSON", "data": 1}} garbage {"value": {"type": "JSON", "data": 2}}'
    r = gw.client.post(f"{topics_url(gw)}/framing/records", content=iter([body]), headers=JSON)
    assert r.status_code == 200
    got = reports(r)
    assert got[0]["error_code"] == 200
    assert got[-1]["error_code"] == 400 and "JSON" in got[-1]["message"]
    assert [json.loads(row["value"]) for row in table(gw, "framing").to_pylist()] == [1]
    # a body that ends inside an object
    r = gw.client.post(
        f"{topics_url(gw)}/framing/records", content=b'{"value": {"type": "JSON"', headers=JSON
    )
    assert reports(r) == [{"error_code": 400, "message": reports(r)[0]["message"]}]
    assert table(gw, "framing").num_rows == 1


def test_produce_errors_before_the_stream(strict_gateway: Gateway) -> None:
    gw = strict_gateway
    make_topic(gw, "p")
    rec = {"value": {"type": "JSON", "data": 1}}
    r = gw.client.post(f"{topics_url(gw)}/missing/records", json=rec)
    assert r.status_code == 404 and r.json()["error_code"] == 40401
    r = gw.client.post(
        f"{topics_url(gw)}/p/records", content=json.dumps(rec), headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 415
    r = gw.client.post(f"{topics_url(gw)}/p/records", json=rec, headers={"Accept": "text/html"})
    assert r.status_code == 406
    r = gw.client.post(f"{topics_url(gw)}/%2e%2e/records", json=rec)
    assert r.status_code in (400, 404) and r.status_code != 500
    for bad in [
        {"records": [rec]},  # a v2 body
        {"value": {"type": "JSON", "data": 1}, "partition_id": "0"},
        {"value": "plain"},
        {"value": {"type": "JSON", "data": 1}, "timestamp": "yesterday"},
        {"value": {"type": "JSON", "data": 1}, "headers": [{"name": "h", "value": "%%%"}]},
        [1, 2],
    ]:
        (rep,) = reports(gw.client.post(f"{topics_url(gw)}/p/records", json=bad))
        assert rep["error_code"] == 400, bad
    assert table(gw, "p").num_rows == 0


def test_records_batch(gateway: Gateway) -> None:
    gw = gateway
    make_topic(gw, "b")
    entries = [
        {"id": "a", "value": {"type": "JSON", "data": 1}},
        {"id": "b", "value": {"type": "BINARY", "data": "@@@"}},
        {"id": "c", "value": {"type": "STRING", "data": "three"}},
    ]
    r = gw.client.post(f"{topics_url(gw)}/b/records:batch", json={"entries": entries})
    assert r.status_code == 207, r.text
    body = r.json()
    assert [s["id"] for s in body["successes"]] == ["a", "c"]
    assert [s["offset"] for s in body["successes"]] == [0, 1]
    assert body["failures"] == [{"id": "b", "error_code": 400, "message": body["failures"][0]["message"]}]
    assert [row["value"] for row in table(gw, "b").to_pylist()] == [b"1", b"three"]
    r = gw.client.post(f"{topics_url(gw)}/b/records:batch", json={"entries": [entries[0], entries[0]]})
    assert r.status_code == 400
    r = gw.client.post(f"{topics_url(gw)}/b/records:batch", json={"entries": []})
    assert r.status_code == 400
    r = gw.client.post(
        f"{topics_url(gw)}/b/records:batch", json={"entries": [{"id": "no spaces", "value": None}]}
    )
    assert r.status_code == 207 and r.json()["failures"][0]["error_code"] == 422
    assert table(gw, "b").num_rows == 2
