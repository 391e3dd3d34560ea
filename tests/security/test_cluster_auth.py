"""Auth in a 2-broker cluster (``topiclake serve`` subprocesses): ACLs made through one broker take effect
on the other within about a second, and requests a broker forwards to a partition's leader or proxies to a
group's coordinator carry the client's principal (signed), never more."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))

from broker_harness import BrokerProcess, wait_for

from topiclake.process.ports import free_port
from topiclake.security import UserStore

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ALICE = ("alice", "alice-pw")
ADMIN = ("admin", "admin-pw")


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    users = tmp_path / "users"
    store = UserStore(users)
    store.add(*ALICE)
    store.add(*ADMIN)
    extra = ["--auth", "--users-file", str(users), "--super-users", "User:admin"]
    started: list[BrokerProcess] = []
    registry = ["--schema-registry-port", str(free_port())]
    try:
        for i in (1, 2):
            more = extra + (registry if i == 1 else [])
            started.append(BrokerProcess(tmp_path / "wh", i, tmp_path / f"b{i}.log", extra=more).start())
        started[0].registry_url = f"http://127.0.0.1:{registry[1]}"  # type: ignore[attr-defined]
        yield started
    finally:
        for b in started:
            b.stop()


def _leaders(b: BrokerProcess, topic: str) -> dict[int, int]:
    meta = httpx.get(f"{b.url}/v1/metadata", auth=ADMIN, timeout=5).json()
    for t in meta["topics"]:
        if t["name"] == topic:
            return {p["partition"]: p["leader"] for p in t["partitions"]}
    return {}


def test_acls_spread_and_forwarding_keeps_the_principal(brokers: list[BrokerProcess]) -> None:
    one, two = brokers
    wait_for(
        lambda: len(httpx.get(f"{one.url}/v1/metadata", auth=ADMIN).json()["brokers"]) == 2, 30, "2 brokers"
    )
    r = httpx.post(f"{one.url}/v1/topics", json={"name": "orders", "partitions": 4}, auth=ADMIN, timeout=30)
    assert r.status_code == 201, r.text
    wait_for(lambda: set(_leaders(two, "orders").values()) == {1, 2}, 30, "leaders on both brokers")

    records = {"records": [{"value": f"v{p}", "partition": p} for p in range(4)]}
    produce = f"{two.url}/v1/topics/orders/records"
    assert httpx.post(produce, json=records, auth=ALICE, timeout=30).status_code == 403

    cid = httpx.get(f"{one.url}/v3/clusters", auth=ADMIN).json()["data"][0]["cluster_id"]
    acl = {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "WRITE",
        "permission": "ALLOW",
    }
    assert httpx.post(f"{one.url}/v3/clusters/{cid}/acls", json=acl, auth=ADMIN).status_code == 201
    added = time.monotonic()
    while True:  # broker 2 polls the ACL table: seen within ~1 s (bounded wait, not a timing assertion)
        r = httpx.post(produce, json=records, auth=ALICE, timeout=30)
        if r.status_code != 403 or time.monotonic() - added > 5:
            break
        time.sleep(0.05)
    assert r.status_code == 200, r.text
    # partitions led by broker 1 were forwarded there with alice's signed principal, and written
    results = r.json()["results"]
    assert all(x.get("error") is None for x in results), results
    assert {x["partition"] for x in results} == {0, 1, 2, 3}

    # a group request is proxied to its coordinator with the principal: Read on the group is checked there
    join = {"topics": ["orders"]}
    for b in (one, two):
        assert (
            httpx.post(f"{b.url}/v1/groups/g1/members", json=join, auth=ALICE, timeout=30).status_code == 403
        )
    acl_g = {**acl, "resource_type": "GROUP", "resource_name": "g1", "operation": "READ"}
    assert httpx.post(f"{two.url}/v3/clusters/{cid}/acls", json=acl_g, auth=ADMIN).status_code == 201
    for b in (one, two):
        deadline = time.monotonic() + 5
        while True:
            r = httpx.post(f"{b.url}/v1/groups/g1/members", json=join, auth=ALICE, timeout=30)
            if r.status_code != 403 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.status_code == 200, (b.broker_id, r.text)

    # the schema registry's port asks for the same credentials (any authenticated user)
    reg = one.registry_url  # type: ignore[attr-defined]
    assert httpx.get(f"{reg}/subjects").status_code == 401
    assert httpx.get(f"{reg}/subjects", auth=ALICE).status_code == 200
