"""The console with auth on: the overview pages show each principal the topics and groups it may Describe
(Kafka's listings), the whole cluster to a principal with Describe on the cluster, and nothing without
credentials; the charts' data follows the same rule."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from gateway_harness import Gateway, start_gateway, stop_gateway

from topiclake.security import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType

USERS = {"admin": "admin-pw", "alice": "alice-pw", "ops": "ops-pw", "nobody": "nobody-pw"}


@dataclass
class Secured:
    gw: Gateway
    authz: Authorizer

    def client(self, user: str | None) -> httpx.Client:
        auth = (user, USERS[user]) if user else None
        return httpx.Client(base_url=self.gw.url, timeout=30, auth=auth)


def _allow(authz: Authorizer, principal: str, op: Operation, rtype: ResourceType, name: str) -> None:
    authz.add([AclBinding(principal, "*", rtype, name, PatternType.LITERAL, op, Permission.ALLOW)])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """Two topics and two groups; alice may Describe orders and billing, ops the cluster, nobody nothing."""
    from topiclake.security import UserStore

    root: Path = tmp_path_factory.mktemp("console-auth")
    store = UserStore(root / "users.htpasswd")
    for name, pw in USERS.items():
        store.add(name, pw)
    gw, server, thread = start_gateway(
        root / "wh",
        settings_overrides={
            "auth": True,
            "users_file": str(root / "users.htpasswd"),
            "super_users": ["User:admin"],
            "console_sample_ms": 200,
        },
    )
    try:
        authz: Authorizer = server.config.app.state.security.authorizer
        s = Secured(gw, authz)
        with s.client("admin") as admin:
            for name in ("orders", "secret-payroll"):
                admin.post("/v1/topics", json={"name": name, "partitions": 2}).raise_for_status()
            for i in range(3):  # records in both topics over a few samples: rates on the charts
                for name, n in (("orders", 5), ("secret-payroll", 7)):
                    records = [{"key": f"k{j}", "value": {"i": i, "j": j}} for j in range(n)]
                    admin.post(f"/v1/topics/{name}/records", json={"records": records}).raise_for_status()
                time.sleep(0.25)
            for group, topic in (("billing", "orders"), ("payroll-readers", "secret-payroll")):
                offsets = [{"topic": topic, "partition": p, "offset": 1} for p in range(2)]
                admin.post(f"/v1/groups/{group}/offsets", json={"offsets": offsets}).raise_for_status()
            time.sleep(0.5)  # the sampler has seen the rates and the groups' lag
        _allow(authz, "User:alice", Operation.DESCRIBE, ResourceType.TOPIC, "orders")
        _allow(authz, "User:alice", Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "orders")
        _allow(authz, "User:alice", Operation.DESCRIBE, ResourceType.GROUP, "billing")
        _allow(authz, "User:ops", Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        yield s
    finally:
        stop_gateway(gw, server, thread)


def _stat(html: str, name: str) -> str:
    found = re.search(rf'id="stat-{name}">([^<]*)<', html)
    assert found, name
    return found.group(1)


def test_without_credentials_the_console_answers_401(secured: Secured) -> None:
    with secured.client(None) as anonymous:
        for path in ("/ui", "/ui/topics", "/ui/groups", "/ui/jobs", "/ui/data/series?name=produce:*"):
            assert anonymous.get(path).status_code == 401, path


def test_overview_pages_show_only_what_the_principal_may_describe(secured: Secured) -> None:
    with secured.client("alice") as alice:
        overview = alice.get("/ui")
        assert overview.status_code == 200
        html = overview.text
        assert 'id="filtered"' in html and "User:alice" in html
        assert _stat(html, "topics") == "1" and _stat(html, "partitions") == "2"
        assert _stat(html, "records") == "15"  # orders' records only, never secret-payroll's 21
        assert _stat(html, "brokers") == "1"  # brokers for every principal, as Kafka's Metadata
        assert "secret-payroll" not in html and "payroll-readers" not in html

        topics = alice.get("/ui/topics")
        assert topics.status_code == 200
        assert 'data-topic="orders"' in topics.text and "secret-payroll" not in topics.text
        assert 'id="create-topic"' not in topics.text  # no Create on the cluster: no form

        groups = alice.get("/ui/groups").text
        assert "billing" in groups and "payroll-readers" not in groups

        jobs = alice.get("/ui/jobs").text
        assert "orders" in jobs and "secret-payroll" not in jobs

        # the route table still guards each topic's and group's own page
        assert alice.get("/ui/topics/orders").status_code == 200
        assert alice.get("/ui/topics/secret-payroll").status_code == 403
        assert alice.get("/ui/groups/payroll-readers").status_code == 403


def test_a_principal_without_any_acl_sees_empty_listings(secured: Secured) -> None:
    with secured.client("nobody") as nobody:
        html = nobody.get("/ui").text
        assert _stat(html, "topics") == "0" and _stat(html, "records") == "0"
        for path in ("/ui/topics", "/ui/groups", "/ui/jobs"):
            page = nobody.get(path)
            assert page.status_code == 200, path
            assert "orders" not in page.text and "secret-payroll" not in page.text, path


@pytest.mark.parametrize("user", ["ops", "admin"])
def test_describe_on_the_cluster_shows_everything(secured: Secured, user: str) -> None:
    with secured.client(user) as client:
        html = client.get("/ui").text
        assert 'id="filtered"' not in html
        assert _stat(html, "topics") == "2" and _stat(html, "records") == "36"
        groups = client.get("/ui/groups").text
        assert "billing" in groups and "payroll-readers" in groups


def _series(client: httpx.Client, *names: str) -> dict[str, list[float | None]]:
    query = "&".join(f"name={n}" for n in names)
    response = client.get(f"/ui/data/series?{query}")
    assert response.status_code == 200
    series: dict[str, list[float | None]] = response.json()["series"]
    return series


def test_chart_data_follows_the_same_rule(secured: Secured) -> None:
    names = ("produce:*", "produce:orders", "produce:secret-payroll", "lag:billing", "lag:payroll-readers")
    with secured.client("admin") as admin:
        everything = _series(admin, *names)
    with secured.client("alice") as alice:
        mine = _series(alice, *names)
    assert any(everything["produce:secret-payroll"]), everything  # there is something to hide
    assert not any(v for v in mine["produce:secret-payroll"]) and not any(
        v for v in mine["lag:payroll-readers"]
    )
    assert any(mine["produce:orders"]) and any(mine["lag:billing"])
    # alice's all-topics rate is the sum of the topics she may see: orders' rate, not the cluster's
    orders = {i: v for i, v in enumerate(mine["produce:orders"]) if v is not None}
    totals = {i: v for i, v in enumerate(mine["produce:*"]) if v is not None}
    assert totals == pytest.approx(orders)
    assert sum(v or 0 for v in everything["produce:*"]) > sum(totals.values())
