"""The native consumer-group API end to end: a real uvicorn gateway on 127.0.0.1 over real Delta tables."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from deltalake import DeltaTable

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.groups.group_coordinator import GroupCoordinator
from topiclake.process.ports import free_port
from topiclake.schemas.offsets import OFFSETS_SCHEMA


class Server:
    def __init__(self, warehouse: Path) -> None:
        port = free_port()
        from topiclake.settings import GatewaySettings

        settings = GatewaySettings(warehouse=str(warehouse), host="127.0.0.1", port=port)
        self.storage = Storage(str(warehouse))
        self.broker = Broker(self.storage, BrokerConfig(linger_ms=1))
        self.groups: GroupCoordinator = self.broker.groups
        app = create_app(settings, broker=self.broker)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)
        self.groups.close()
        self.broker.close()


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "wh")
    s.broker.create_topic("t", 4)
    s.broker.produce("t", [Record(value=b"%d" % i, partition=i % 4) for i in range(40)])
    try:
        yield s
    finally:
        s.stop()


def _join(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/v1/groups/g/members", json={"topics": ["t"], **body})
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def test_join_heartbeat_commit_lag_over_http(srv: Server) -> None:
    c = srv.client
    a = _join(c, session_timeout_ms=5000)
    assert a["assignment"] == [{"topic": "t", "partition": p} for p in range(4)]
    b = _join(c)
    hb = c.post(
        f"/v1/groups/g/members/{a['member_id']}/heartbeat", json={"generation_id": a["generation_id"]}
    )
    assert hb.status_code == 200 and hb.json()["rebalance_in_progress"] is True
    assert len(hb.json()["assignment"]) == 2
    gen = hb.json()["generation_id"]
    body = {
        "member_id": a["member_id"],
        "generation_id": gen,
        "offsets": [{"topic": "t", "partition": 0, "offset": 4}],
    }
    r = c.post("/v1/groups/g/offsets", json=body)
    assert r.status_code == 200, r.text
    got = c.get("/v1/groups/g/offsets").json()["offsets"]
    assert [(o["partition"], o["offset"], o["generation_id"]) for o in got] == [(0, 4, gen)]
    lag = c.get("/v1/groups/g/lag").json()
    assert {p["partition"]: p["lag"] for p in lag["partitions"]} == {0: 6, 1: 10, 2: 10, 3: 10}
    assert lag["partitions"][1]["estimated"] is True
    d = c.get("/v1/groups/g").json()
    assert d["state"] in ("Stable", "CompletingRebalance") and len(d["members"]) == 2
    assert [g["group_id"] for g in c.get("/v1/groups").json()["groups"]] == ["g"]
    assert c.delete(f"/v1/groups/g/members/{b['member_id']}").status_code == 204
    assert c.delete("/v1/groups/g").status_code == 409  # a is still a member
    assert c.delete(f"/v1/groups/g/members/{a['member_id']}").status_code == 204
    # the offsets table is plain Delta with the documented schema
    table = DeltaTable(srv.storage.system_uri("consumer_offsets")).to_pyarrow_table()
    assert table.schema.equals(OFFSETS_SCHEMA) and table["committed_offset"].to_pylist() == [4]


def test_reset_and_delete_over_http(srv: Server) -> None:
    c = srv.client
    r = c.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "t", "partition": 1, "offset": 5}]})
    assert r.status_code == 200, r.text  # simple commit: the group has no members
    plan = c.post("/v1/groups/g/offsets/reset", json={"to": "shift", "value": -2, "dry_run": True}).json()
    assert plan["plan"] == [{"topic": "t", "partition": 1, "current_offset": 5, "new_offset": 3}]
    assert c.get("/v1/groups/g/offsets").json()["offsets"][0]["offset"] == 5
    c.post("/v1/groups/g/offsets/reset", json={"to": "latest", "topics": ["t"]})
    assert {o["offset"] for o in c.get("/v1/groups/g/offsets").json()["offsets"]} == {10}
    a = _join(c)
    assert c.post("/v1/groups/g/offsets/reset", json={"to": "earliest"}).status_code == 409
    c.delete(f"/v1/groups/g/members/{a['member_id']}")
    assert c.delete("/v1/groups/g").status_code == 204
    assert c.get("/v1/groups/g").status_code == 404


def test_errors_over_http(srv: Server) -> None:
    c = srv.client
    a = _join(c)
    version = DeltaTable(srv.storage.system_uri("consumer_offsets")).version()

    def err(r: httpx.Response, status: int, code: str) -> None:
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == code, r.text

    err(c.get("/v1/groups/nope"), 404, "group_not_found")
    err(c.post("/v1/groups/nope/members/x/heartbeat", json={"generation_id": 1}), 404, "group_not_found")
    err(c.post("/v1/groups/g/members/ghost/heartbeat", json={"generation_id": 1}), 404, "unknown_member_id")
    err(
        c.post(f"/v1/groups/g/members/{a['member_id']}/heartbeat", json={"generation_id": 77}),
        409,
        "illegal_generation",
    )
    beyond = {
        "member_id": a["member_id"],
        "generation_id": a["generation_id"],
        "offsets": [{"topic": "t", "partition": 0, "offset": 11}],
    }
    err(c.post("/v1/groups/g/offsets", json=beyond), 416, "offset_out_of_range")
    stale = {**beyond, "generation_id": 55, "offsets": [{"topic": "t", "partition": 0, "offset": 1}]}
    err(c.post("/v1/groups/g/offsets", json=stale), 409, "illegal_generation")
    simple = {"offsets": [{"topic": "t", "partition": 0, "offset": 1}]}
    err(c.post("/v1/groups/g/offsets", json=simple), 409, "group_not_empty")
    unknown_topic = {**beyond, "offsets": [{"topic": "zz", "partition": 0, "offset": 1}]}
    err(c.post("/v1/groups/g/offsets", json=unknown_topic), 404, "topic_not_found")
    err(c.post("/v1/groups/g/offsets", json={"offsets": []}), 422, "invalid_request")
    err(c.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "t"}]}), 422, "invalid_request")
    err(
        c.post("/v1/groups/g/members", content=b"{not json", headers={"content-type": "application/json"}),
        422,
        "invalid_request",
    )
    err(c.post("/v1/groups/g/members", json={"topics": ["t"], "assignor": "magic"}), 422, "invalid_request")
    err(c.post("/v1/groups/g/members", json={"topics": ["t"], "pattern": "t"}), 400, "invalid_request")
    err(c.post("/v1/groups/other/offsets/reset", json={"to": "offset"}), 400, "invalid_request")
    assert DeltaTable(srv.storage.system_uri("consumer_offsets")).version() == version  # nothing written
    assert c.get("/v1/groups/g").json()["members"][0]["member_id"] == a["member_id"]  # group intact


def test_openapi_documents_the_group_routes(srv: Server) -> None:
    spec = srv.client.get("/openapi.json").json()
    join = spec["paths"]["/v1/groups/{group}/members"]["post"]
    assert join["summary"].startswith("Join")
    schemas = spec["components"]["schemas"]
    for name in ("JoinBody", "HeartbeatBody", "CommitBody", "ResetBody"):
        assert schemas[name].get("examples"), name
