"""A consumer group over a cluster: its coordinator is one broker, reached through any broker, and when
that broker dies (leading partitions too) the group moves, and consumption resumes after the commit. On a
local directory and on S3 (the ``warehouse`` fixture)."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster_procs import Cluster, Warehouse, until

from topiclake.platform.cluster.assignment import coordinator_for

pytestmark = pytest.mark.slow

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def produce(url: str, values: list[str]) -> None:
    body = {"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]}
    r = httpx.post(f"{url}/topics/gt", json=body, headers={"Content-Type": BINARY_V2}, timeout=30)
    assert r.status_code == 200, r.text
    assert all(o.get("error") is None for o in r.json()["offsets"])


def join(url: str, group: str, name: str) -> str:
    cfg = {"name": name, "format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    headers = {"Content-Type": V2, "Accept": V2}
    r = httpx.post(f"{url}/consumers/{group}", json=cfg, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    base: str = r.json()["base_uri"]
    deadline = time.monotonic() + 30
    while True:
        # a broker whose view still counts a dead coordinator alive answers a retriable 503 ("retry"),
        # as it should, and a client retries (on S3 the 2-s listing can see a death a beat after the
        # partition state does)
        r = httpx.post(f"{base}/subscription", json={"topics": ["gt"]}, headers=headers, timeout=30)
        if r.status_code == 204:
            return base
        retriable = r.status_code == 503 and r.json().get("error", {}).get("retriable") is True
        assert retriable and time.monotonic() < deadline, r.text
        time.sleep(0.5)


def drain(base: str, want: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    def more() -> bool:
        r = httpx.get(f"{base}/records", params={"timeout": 500}, headers={"Accept": BINARY_V2}, timeout=30)
        assert r.status_code == 200, r.text
        got.extend(r.json())
        return len(got) >= want

    until(more, 60, f"{want} records")
    return got


def test_a_group_resumes_after_its_coordinator_and_a_leader_die(tmp_path: Path, warehouse: Warehouse) -> None:
    cluster = Cluster(warehouse, tmp_path)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        until(lambda: len(cluster.metadata(1)["brokers"]) == 3, what="3 brokers")
        entry = cluster.brokers[1].url
        r = httpx.post(f"{entry}/v1/topics", json={"name": "gt", "partitions": 3}, timeout=30)
        assert r.status_code == 201
        until(lambda: len(cluster.leaders("gt", 2)) == 3, what="leaders")
        group = next(f"billing-{i}" for i in range(100) if coordinator_for(f"billing-{i}", [1, 2, 3]) == 3)
        assert 3 in cluster.leaders("gt", 1).values()  # broker 3 leads a partition and coordinates

        produce(entry, [f"a{i}" for i in range(60)])
        base = join(entry, group, "m1")
        assert base.startswith(cluster.brokers[3].url)  # the coordinator's own address, as REST Proxy does
        first = drain(base, 60)
        first_values = sorted(base64.b64decode(r["value"]).decode() for r in first)
        assert first_values == sorted(f"a{i}" for i in range(60))
        assert httpx.post(f"{base}/offsets", headers={"Content-Type": V2}, timeout=30).status_code == 200

        produce(entry, [f"b{i}" for i in range(30)])
        cluster.kill9(3)
        until(lambda: 3 not in cluster.leaders("gt", 1).values(), 30, "leaders moved")
        # the member's instance died with its coordinator: a new member joins through any broker
        base2 = join(entry, group, "m2")
        assert not base2.startswith(cluster.brokers[3].url)
        second = drain(base2, 30)
        values = sorted(base64.b64decode(r["value"]).decode() for r in second)
        assert values == sorted(f"b{i}" for i in range(30)), "resumed exactly after the commit"
        assert httpx.post(f"{base2}/offsets", headers={"Content-Type": V2}, timeout=30).status_code == 200
        lag = httpx.get(f"{entry}/v1/groups/{group}/lag", timeout=30).json()
        assert "partitions" in lag, lag
        assert sum(p["lag"] for p in lag["partitions"]) == 0
    finally:
        cluster.stop_all()
