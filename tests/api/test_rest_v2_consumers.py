"""Confluent REST Proxy v2 consumer instances end to end: a real uvicorn gateway, real Delta tables."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI
from gateway_harness import Gateway, start_gateway, stop_gateway

from topiclake.api.consumer_instances import ConsumerInstanceManager
from topiclake.api.routes import rest_v2_consumers, rest_v3_groups
from topiclake.platform import Record
from topiclake.platform.groups.group_coordinator import GroupCoordinator

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


class Consumers:
    """A gateway with consumer instances whose timeouts the test picks."""

    def __init__(self, gw: Gateway, app: FastAPI, manager: ConsumerInstanceManager) -> None:
        self.gw = gw
        self.app = app
        self.manager = manager
        self.client = gw.client

    # -- requests as a REST Proxy client sends them

    def post(self, path: str, body: Any = None, ctype: str = V2) -> httpx.Response:
        content = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
        return self.client.post(path, content=content, headers={"Content-Type": ctype, "Accept": V2})

    def create(self, group: str, name: str, **config: Any) -> str:
        r = self.post(f"/consumers/{group}", {"name": name, "format": "json", **config})
        assert r.status_code == 200, r.text
        return f"/consumers/{group}/instances/{name}"

    def subscribe(self, base: str, *topics: str) -> None:
        r = self.post(f"{base}/subscription", {"topics": list(topics)})
        assert r.status_code == 204, r.text

    def assignment(self, base: str) -> list[tuple[str, int]]:
        r = self.client.get(f"{base}/assignments", headers={"Accept": V2})
        assert r.status_code == 200, r.text
        return [(p["topic"], p["partition"]) for p in r.json()["partitions"]]

    def records(self, base: str, timeout_ms: int = 200, accept: str = JSON_V2, **params: Any) -> list[Any]:
        r = self.client.get(
            f"{base}/records", params={"timeout": timeout_ms, **params}, headers={"Accept": accept}
        )
        assert r.status_code == 200, r.text
        body: list[Any] = r.json()
        return body

    def committed(self, base: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        body = orjson.dumps({"partitions": [{"topic": t, "partition": p} for t, p in partitions]})
        r = self.client.request(
            "GET", f"{base}/offsets", content=body, headers={"Content-Type": V2, "Accept": V2}
        )
        assert r.status_code == 200, r.text
        return {(o["topic"], o["partition"]): o["offset"] for o in r.json()["offsets"]}


def open_consumers(gw: Gateway, server: uvicorn.Server, **options: Any) -> Consumers:
    """Add the consumer routes (if the app lacks them) and a manager with the test's timeouts."""
    app = server.config.app
    assert isinstance(app, FastAPI)
    paths = {getattr(r, "path", "") for r in app.routes}
    if "/consumers/{group}" not in paths:
        app.include_router(rest_v2_consumers.router)
    if "/v3/clusters/{cluster_id}/consumer-groups" not in paths:
        app.include_router(rest_v3_groups.router)
    groups = getattr(app.state, "groups", None) or getattr(gw.broker, "groups", None)
    if groups is None:
        groups = GroupCoordinator(gw.broker, min_session_timeout_ms=100)
        app.state.groups = groups
    previous = getattr(app.state, "consumer_instances", None)
    if previous is not None:
        previous.close()
    options = {"heartbeat_interval_ms": 100, "session_timeout_ms": 10_000, **options}
    manager = ConsumerInstanceManager(gw.broker, groups, **options)
    app.state.consumer_instances = manager
    return Consumers(gw, app, manager)


@pytest.fixture
def consumers(tmp_path: Path) -> Iterator[Consumers]:
    gw, server, thread = start_gateway(tmp_path / "wh")
    c = open_consumers(gw, server)
    try:
        yield c
    finally:
        c.manager.close()
        stop_gateway(gw, server, thread)


@pytest.fixture
def short_lived(tmp_path: Path) -> Iterator[Consumers]:
    """Instances removed after 1.5 s without requests."""
    gw, server, thread = start_gateway(tmp_path / "wh")
    c = open_consumers(gw, server, instance_timeout_ms=1500)
    try:
        yield c
    finally:
        c.manager.close()
        stop_gateway(gw, server, thread)


def produce(c: Consumers, topic: str, per_partition: dict[int, int], start: int = 0) -> None:
    records = [
        Record(key=f"k{p}-{i}".encode(), value=orjson.dumps({"p": p, "i": i}), partition=p)
        for p, n in per_partition.items()
        for i in range(start, start + n)
    ]
    results = c.gw.broker.produce(topic, records)
    assert all(r.error is None for r in results)


def until(check: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def drain(c: Consumers, base: str, rounds: int = 3) -> list[Any]:
    """Read until ``rounds`` reads in a row return nothing."""
    got: list[Any] = []
    empty = 0
    while empty < rounds:
        batch = c.records(base, timeout_ms=100)
        got.extend(batch)
        empty = 0 if batch else empty + 1
    return got


def assert_error(r: httpx.Response, status: int, code: int) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == code, body
    assert body["message"]


# ---------------------------------------------------------------------------------------------- groups


def test_two_instances_split_four_partitions_and_read_every_record_once(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("orders", partitions=4)
    a = c.create("g1", "a", **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    b = c.create("g1", "b", **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(a, "orders")
    c.subscribe(b, "orders")
    until(lambda: len(c.assignment(a)) == 2 and len(c.assignment(b)) == 2, what="a 2/2 split")
    owned_a, owned_b = set(c.assignment(a)), set(c.assignment(b))
    assert owned_a | owned_b == {("orders", p) for p in range(4)}
    assert not owned_a & owned_b

    produce(c, "orders", {0: 25, 1: 25, 2: 25, 3: 25})
    got_a, got_b = drain(c, a), drain(c, b)

    assert {("orders", r["partition"]) for r in got_a} <= owned_a
    assert {("orders", r["partition"]) for r in got_b} <= owned_b
    seen = [(r["partition"], r["offset"]) for r in got_a + got_b]
    assert len(seen) == 100 and len(set(seen)) == 100
    assert {(r["value"]["p"], r["value"]["i"]) for r in got_a + got_b} == {
        (p, i) for p in range(4) for i in range(25)
    }
    # records come in offset order per partition, with Confluent's fields plus timestamp and headers
    for p in range(4):
        offsets = [r["offset"] for r in got_a + got_b if r["partition"] == p]
        assert offsets == sorted(offsets) == list(range(25))
    first = got_a[0]
    assert set(first) == {"topic", "key", "value", "partition", "offset", "timestamp", "headers"}
    assert first["topic"] == "orders" and isinstance(first["timestamp"], int) and first["headers"] == []

    # the v3 view agrees: two consumers, two partitions each
    cid = c.gw.broker.cluster_id
    r = c.client.get(f"/v3/clusters/{cid}/consumer-groups/g1/consumers")
    assert r.status_code == 200, r.text
    members = r.json()["data"]
    assert sorted(m["client_id"] for m in members) == ["a", "b"]


def test_a_read_answers_as_soon_as_records_are_there(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("fast", partitions=4)
    base = c.create("g", "x", **{"auto.offset.reset": "earliest"})
    c.subscribe(base, "fast")
    until(lambda: len(c.assignment(base)) == 4, what="the assignment")
    produce(c, "fast", {2: 3})

    started = time.monotonic()
    got = c.records(base, timeout_ms=20_000)
    assert len(got) == 3
    assert time.monotonic() - started < 5  # nowhere near the 20 s timeout

    # long-poll: a read waiting on an empty log answers when a record arrives
    result: list[Any] = []
    reader = threading.Thread(target=lambda: result.extend(c.records(base, timeout_ms=20_000)))
    started = time.monotonic()
    reader.start()
    time.sleep(0.3)
    produce(c, "fast", {1: 1})
    reader.join(30)
    assert [(r["partition"], r["offset"]) for r in result] == [(1, 0)]
    assert time.monotonic() - started < 5

    # nothing there: the read waits its timeout and answers an empty list
    assert c.records(base, timeout_ms=100) == []


def test_binary_format_returns_base64_with_timestamp_and_headers(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("raw")
    c.gw.broker.produce(
        "raw", [Record(key=b"\x00k", value=b"\xffv", headers=[("h", b"1")], timestamp_ms=1_767_225_600_000)]
    )
    r = c.post("/consumers/gb", {"name": "bin", "auto.offset.reset": "earliest"})  # binary by default
    assert r.status_code == 200
    assert r.json() == {
        "instance_id": "bin",
        "base_uri": f"{c.gw.url}/consumers/gb/instances/bin",
    }
    base = "/consumers/gb/instances/bin"
    assert (
        c.post(f"{base}/assignments", {"partitions": [{"topic": "raw", "partition": 0}]}).status_code == 204
    )
    got = c.records(base, accept=BINARY_V2)
    assert got == [
        {
            "topic": "raw",
            "key": base64.b64encode(b"\x00k").decode(),
            "value": base64.b64encode(b"\xffv").decode(),
            "partition": 0,
            "offset": 0,
            "timestamp": 1_767_225_600_000,
            "headers": [{"key": "h", "value": base64.b64encode(b"1").decode()}],
        }
    ]


# ---------------------------------------------------------------------------------------------- offsets


def test_commit_with_and_without_body_and_a_new_instance_resumes(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("events", partitions=2)
    produce(c, "events", {0: 10, 1: 10})
    tps = [("events", 0), ("events", 1)]
    cfg = {"auto.offset.reset": "earliest", "auto.commit.enable": "false"}

    a = c.create("g", "a", **cfg)
    c.subscribe(a, "events")
    assert len(drain(c, a)) == 20
    assert c.committed(a, tps) == {}
    # with a body: Confluent's offset is the last record processed; the committed offset is the next one
    r = c.post(
        f"{a}/offsets",
        {
            "offsets": [
                {"topic": "events", "partition": 0, "offset": 4},
                {"topic": "events", "partition": 1, "offset": 6, "metadata": "m"},
            ]
        },
    )
    assert r.status_code == 200, r.text
    assert c.committed(a, tps) == {("events", 0): 5, ("events", 1): 7}
    assert c.client.delete(a).status_code == 204

    b = c.create("g", "b", **cfg)
    c.subscribe(b, "events")
    resumed = drain(c, b)
    assert sorted((r["partition"], r["offset"]) for r in resumed) == [(0, o) for o in range(5, 10)] + [
        (1, o) for o in range(7, 10)
    ]
    # without a body: everything consumed
    assert c.post(f"{b}/offsets").status_code == 200
    assert c.committed(b, tps) == {("events", 0): 10, ("events", 1): 10}
    assert c.client.delete(b).status_code == 204

    d = c.create("g", "d", **cfg)
    c.subscribe(d, "events")
    assert drain(c, d, rounds=2) == []
    produce(c, "events", {1: 2}, start=10)
    assert sorted((r["partition"], r["offset"]) for r in drain(c, d)) == [(1, 10), (1, 11)]


def test_auto_commit_commits_what_was_read_before_the_next_read(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("auto")
    produce(c, "auto", {0: 5})
    base = c.create("ga", "a", **{"auto.offset.reset": "earliest"})  # auto commit is on by default
    c.subscribe(base, "auto")
    assert len(c.records(base, timeout_ms=2000)) == 5
    assert c.committed(base, [("auto", 0)]) == {}  # not yet: the next read commits first
    c.records(base, timeout_ms=50)
    assert c.committed(base, [("auto", 0)]) == {("auto", 0): 5}


# ---------------------------------------------------------------------------------------------- manual


def test_manual_assignment_and_seeks(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("log", partitions=2)
    t0 = 1_767_225_600_000
    c.gw.broker.produce(
        "log", [Record(value=orjson.dumps(i), timestamp_ms=t0 + 1000 * i, partition=0) for i in range(10)]
    )
    base = c.create("gm", "m", **{"auto.offset.reset": "latest"})
    assert (
        c.post(f"{base}/assignments", {"partitions": [{"topic": "log", "partition": 0}]}).status_code == 204
    )
    assert c.assignment(base) == [("log", 0)]
    assert c.records(base) == []  # latest: starts at the end

    part = [{"topic": "log", "partition": 0}]
    assert c.post(f"{base}/positions/beginning", {"partitions": part}).status_code == 204
    assert [r["offset"] for r in drain(c, base)] == list(range(10))

    r = c.post(f"{base}/positions", {"offsets": [{"topic": "log", "partition": 0, "offset": 5}]})
    assert r.status_code == 204, r.text
    assert [r["value"] for r in drain(c, base)] == [5, 6, 7, 8, 9]

    assert c.post(f"{base}/positions/end", {"partitions": part}).status_code == 204
    assert c.records(base) == []

    # by timestamp: ISO-8601 as Confluent's Instant, or epoch milliseconds
    iso = "2026-01-01T00:00:03Z"
    r = c.post(f"{base}/positions", {"timestamps": [{"topic": "log", "partition": 0, "timestamp": iso}]})
    assert r.status_code == 204, r.text
    assert [r["offset"] for r in drain(c, base)] == list(range(3, 10))
    ts = {"topic": "log", "partition": 0, "timestamp": t0 + 7500}
    assert c.post(f"{base}/positions", {"timestamps": [ts]}).status_code == 204
    assert [r["offset"] for r in drain(c, base)] == [8, 9]
    after = {"topic": "log", "partition": 0, "timestamp": t0 + 10**9}
    assert c.post(f"{base}/positions", {"timestamps": [after]}).status_code == 204
    assert c.records(base) == []  # after the last record: the end

    # Kafka's illegal states: seek on a partition not assigned, subscribe while assigned
    other = {"offsets": [{"topic": "log", "partition": 1, "offset": 0}]}
    assert_error(c.post(f"{base}/positions", other), 409, 40903)
    assert_error(c.post(f"{base}/subscription", {"topics": ["log"]}), 409, 40903)
    # a manually assigned instance commits as a standalone consumer
    assert (
        c.post(f"{base}/offsets", {"offsets": [{"topic": "log", "partition": 0, "offset": 9}]}).status_code
        == 200
    )
    assert c.committed(base, [("log", 0)]) == {("log", 0): 10}
    # unsubscribe also clears a manual assignment
    assert c.client.delete(f"{base}/subscription").status_code == 204
    assert c.assignment(base) == []


def test_subscription_by_topics_and_by_pattern(consumers: Consumers) -> None:
    c = consumers
    for name in ("sales-eu", "sales-us", "stock"):
        c.gw.broker.create_topic(name)
    base = c.create("gp", "p")
    c.subscribe(base, "stock")
    r = c.client.get(f"{base}/subscription", headers={"Accept": V2})
    assert r.json() == {"topics": ["stock"]}
    c.subscribe(base, "sales-eu", "stock")  # a new subscription replaces the old one
    assert c.client.get(f"{base}/subscription").json() == {"topics": ["sales-eu", "stock"]}
    assert c.client.delete(f"{base}/subscription").status_code == 204
    assert c.client.get(f"{base}/subscription").json() == {"topics": []}
    assert c.post(f"{base}/subscription", {"topic_pattern": "sales-.*"}).status_code == 204
    assert c.client.get(f"{base}/subscription").json() == {"topics": ["sales-eu", "sales-us"]}
    until(lambda: sorted(c.assignment(base)) == [("sales-eu", 0), ("sales-us", 0)], what="pattern assignment")


# ---------------------------------------------------------------------------------------------- lifecycle


def test_an_idle_instance_is_removed_and_its_partitions_go_to_the_other(short_lived: Consumers) -> None:
    c = short_lived
    c.gw.broker.create_topic("work", partitions=4)
    cfg = {"auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    a = c.create("gi", "a", **cfg)
    b = c.create("gi", "b", **cfg)
    c.subscribe(a, "work")
    c.subscribe(b, "work")
    until(lambda: len(c.assignment(a)) == 2 and len(c.assignment(b)) == 2, what="a 2/2 split")
    produce(c, "work", {0: 5, 1: 5, 2: 5, 3: 5})
    got_b = drain(c, b)
    assert len(got_b) == 10

    # 'a' makes no more requests; 'b' keeps reading and takes over a's partitions
    rest: list[Any] = []

    def b_owns_all() -> bool:
        rest.extend(c.records(b, timeout_ms=100))
        return len(c.assignment(b)) == 4

    until(b_owns_all, timeout_s=20, what="b to own every partition")
    rest.extend(drain(c, b))
    seen = {(r["partition"], r["offset"]) for r in got_b + rest}
    assert seen == {(p, o) for p in range(4) for o in range(5)}
    assert_error(c.client.get(f"{a}/records", headers={"Accept": JSON_V2}), 404, 40403)


def test_delete_leaves_the_group(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("d", partitions=2)
    a = c.create("gd", "a")
    b = c.create("gd", "b")
    c.subscribe(a, "d")
    c.subscribe(b, "d")
    until(lambda: len(c.assignment(b)) == 1, what="a split")
    assert c.client.delete(a).status_code == 204
    until(lambda: len(c.assignment(b)) == 2, what="b to get both partitions")
    assert_error(c.client.delete(a), 404, 40403)


# ---------------------------------------------------------------------------------------------- errors


def test_confluent_errors(consumers: Consumers) -> None:
    c = consumers
    c.gw.broker.create_topic("t")
    base = c.create("ge", "json-one")
    # unknown instance, existing name, wrong format
    assert_error(
        c.client.get("/consumers/ge/instances/nobody/records", headers={"Accept": JSON_V2}), 404, 40403
    )
    assert_error(c.client.get("/consumers/other/instances/json-one/assignments"), 404, 40403)
    assert_error(c.post("/consumers/ge/instances/nobody/subscription", {"topics": ["t"]}), 404, 40403)
    assert_error(c.post("/consumers/ge", {"name": "json-one", "format": "json"}), 409, 40902)
    assert_error(c.client.get(f"{base}/records", headers={"Accept": BINARY_V2}), 406, 40601)
    assert_error(c.client.get(f"{base}/records", headers={"Accept": V2}), 406, 40601)  # binary, as Confluent
    assert_error(c.client.get(f"{base}/records", headers={"Accept": "text/csv"}), 406, 406)
    assert c.client.get(f"{base}/records", params={"timeout": 10}).status_code == 200  # no Accept: its own


@pytest.mark.parametrize(
    ("path", "body", "ctype", "status", "code"),
    [
        ("/consumers/gx", b"{not json", V2, 400, 400),
        ("/consumers/gx", [1, 2], V2, 400, 400),
        ("/consumers/gx", {"format": "thrift"}, V2, 422, 42204),
        ("/consumers/gx", {"format": "xml"}, V2, 422, 42204),
        ("/consumers/gx", {"auto.offset.reset": "sometimes"}, V2, 422, 42204),
        ("/consumers/gx", {"auto.commit.enable": "maybe"}, V2, 422, 42204),
        ("/consumers/gx", {"consumer.request.timeout.ms": "soon"}, V2, 422, 42204),
        ("/consumers/gx", {"name": "a/b"}, V2, 422, 42204),
        ("/consumers/gx", {"name": "n"}, "text/plain", 415, 415),
        ("{base}/subscription", {"topics": "t"}, V2, 400, 400),
        ("{base}/subscription", {}, V2, 422, 422),
        ("{base}/subscription", {"topic_pattern": "("}, V2, 422, 422),
        ("{base}/subscription", None, V2, 422, 422),
        ("{base}/assignments", {"partitions": [{"topic": "t", "partition": "x"}]}, V2, 400, 400),
        ("{base}/assignments", {"partitions": [{"topic": "t", "partition": 7}]}, V2, 404, 40402),
        ("{base}/assignments", {"partitions": [{"topic": "nope", "partition": 0}]}, V2, 404, 40401),
        ("{base}/assignments", {"partitions": "all"}, V2, 400, 400),
        ("{base}/positions", {"offsets": [{"topic": "t", "partition": 0, "offset": "x"}]}, V2, 400, 400),
        (
            "{base}/positions",
            {"timestamps": [{"topic": "t", "partition": 0, "timestamp": "later"}]},
            V2,
            400,
            400,
        ),
        ("{base}/positions", {}, V2, 422, 422),
        ("{base}/positions/beginning", {"partitions": [{"partition": 0}]}, V2, 400, 400),
        ("{base}/offsets", {"offsets": [{"topic": "t", "partition": 0, "offset": -5}]}, V2, 400, 400),
        ("{base}/offsets", {"offsets": [{"topic": "t", "partition": 0}]}, V2, 400, 400),
        ("{base}/offsets", {"offsets": [{"topic": "t", "partition": 0, "offset": 99}]}, V2, 416, 40002),
    ],
)
def test_bad_bodies_get_clear_errors(
    consumers: Consumers, path: str, body: Any, ctype: str, status: int, code: int
) -> None:
    c = consumers
    c.gw.broker.create_topic("t")
    base = c.create("gx", "i")
    assert c.post(f"{base}/assignments", {"partitions": [{"topic": "t", "partition": 0}]}).status_code == 204
    assert_error(c.post(path.format(base=base), body, ctype), status, code)
    # the instance still works
    assert c.records(base, timeout_ms=10) == []


def test_committed_offsets_needs_partitions(consumers: Consumers) -> None:
    c = consumers
    base = c.create("go", "i")
    assert_error(c.client.get(f"{base}/offsets"), 404, 40402)
