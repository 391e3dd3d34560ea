"""HTTP authentication and authorization against a real gateway (uvicorn on 127.0.0.1) with auth on.

For each route family: no credentials -> 401 (with WWW-Authenticate, in the family's error shape), a user
without an ACL -> 403, the same user with the ACL Kafka checks -> success.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from secure_harness import SecureGateway

from topiclake.security import Operation, PatternType, Permission, ResourceType

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
V2 = "application/vnd.kafka.v2+json"
V2_JSON = "application/vnd.kafka.json.v2+json"


@dataclass
class Case:
    name: str
    method: str
    path: str
    acls: list[tuple[Operation, ResourceType, str]]
    body: Any = None
    content_type: str = "application/json"
    native: bool = False


def _cases(cid: str) -> list[Case]:
    v3 = f"/v3/clusters/{cid}"
    return [
        Case(
            "native produce (fast path)",
            "POST",
            "/v1/topics/orders/records",
            [(Operation.WRITE, T, "orders")],
            {"records": [{"value": "hello"}]},
            native=True,
        ),
        Case(
            "native fetch",
            "GET",
            "/v1/topics/orders/partitions/0/records?offset=0&wait_ms=0",
            [(Operation.READ, T, "orders")],
            native=True,
        ),
        Case(
            "native describe topic",
            "GET",
            "/v1/topics/orders",
            [(Operation.DESCRIBE, T, "orders")],
            native=True,
        ),
        Case(
            "native configs",
            "PATCH",
            "/v1/topics/orders/configs",
            [(Operation.ALTER_CONFIGS, T, "orders")],
            {"set": {"retention.ms": "86400000"}},
            native=True,
        ),
        Case(
            "native create topic",
            "POST",
            "/v1/topics",
            [(Operation.CREATE, T, "alice-new")],
            {"name": "alice-new", "partitions": 1},
            native=True,
        ),
        Case(
            "native join group",
            "POST",
            "/v1/groups/g1/members",
            [(Operation.READ, G, "g1")],
            {"topics": ["orders"]},
            native=True,
        ),
        Case(
            "native idempotent producer",
            "POST",
            "/v1/producers",
            [(Operation.IDEMPOTENT_WRITE, C, "kafka-cluster")],
            native=True,
        ),
        Case(
            "v2 produce",
            "POST",
            "/topics/orders",
            [(Operation.WRITE, T, "orders")],
            {"records": [{"value": {"a": 1}}]},
            V2_JSON,
        ),
        Case(
            "v2 topic",
            "GET",
            "/topics/orders",
            [(Operation.DESCRIBE, T, "orders"), (Operation.DESCRIBE_CONFIGS, T, "orders")],
        ),
        Case(
            "v2 consumer instance",
            "POST",
            "/consumers/g2",
            [(Operation.READ, G, "g2")],
            {"name": "c1", "format": "json"},
            V2,
        ),
        Case("v3 topic", "GET", f"{v3}/topics/orders", [(Operation.DESCRIBE, T, "orders")]),
        Case("v3 delete topic", "DELETE", f"{v3}/topics/doomed", [(Operation.DELETE, T, "doomed")]),
        Case(
            "v3 grow partitions",
            "PATCH",
            f"{v3}/topics/orders",
            [(Operation.ALTER, T, "orders")],
            {"partitions_count": 2},
        ),
        Case("v3 group", "GET", f"{v3}/consumer-groups/g1", [(Operation.DESCRIBE, G, "g1")]),
        Case(
            "v3 produce",
            "POST",
            f"{v3}/topics/orders/records",
            [(Operation.WRITE, T, "orders")],
            {"value": {"type": "JSON", "data": 1}},
        ),
        Case("v3 acls", "GET", f"{v3}/acls", [(Operation.DESCRIBE, C, "kafka-cluster")]),
    ]


def _request(client: httpx.Client, case: Case) -> httpx.Response:
    kwargs: dict[str, Any] = {}
    if case.body is not None:
        kwargs["json"] = case.body
        kwargs["headers"] = {"content-type": case.content_type}
    return client.request(case.method, case.path, **kwargs)


@pytest.fixture(scope="module")
def prepared(secure: SecureGateway) -> SecureGateway:
    with secure.client("admin") as admin:
        for t in ("orders", "secret", "doomed"):
            assert admin.post("/v1/topics", json={"name": t, "partitions": 1}).status_code == 201
        assert admin.post("/v1/topics/orders/records", json={"records": [{"value": "x"}]}).status_code == 200
    return secure


def test_the_matrix(prepared: SecureGateway) -> None:
    sg = prepared
    sg.clear()
    anonymous, alice = sg.client(), sg.client("alice")
    for case in _cases(sg.cluster_id):
        r = _request(anonymous, case)
        assert r.status_code == 401, (case.name, r.text)
        assert 'Basic realm="topiclake"' in r.headers.get_list("www-authenticate"), case.name
        assert 'Bearer realm="topiclake"' in r.headers.get_list("www-authenticate"), case.name
        if case.native:
            assert r.json()["error"]["code"] == "unauthorized", case.name
        else:
            assert r.json()["error_code"] == 40101, case.name

        r = _request(alice, case)
        assert r.status_code == 403, (case.name, r.text)
        if case.native:
            assert r.json()["error"]["code"] == "forbidden", case.name
        else:
            assert r.json()["error_code"] == 40301, case.name

        for op, rtype, name in case.acls:
            sg.allow("User:alice", op, rtype, name)
        r = _request(alice, case)
        assert r.status_code < 400, (case.name, r.status_code, r.text)
        sg.clear()


def test_wrong_credentials_say_nothing_about_what_was_wrong(prepared: SecureGateway) -> None:
    bodies = []
    for user, pw in (("alice", "nope"), ("nobody", "alice-pw")):
        r = prepared.client(user, pw).get("/topics")
        assert r.status_code == 401
        bodies.append(r.json())
    r = prepared.client(Authorization="Bearer not.a.token").get("/topics")
    assert r.status_code == 401
    bodies.append(r.json())
    r = prepared.client(Authorization="Basic " + base64.b64encode(b"garbage").decode()).get("/topics")
    bodies.append(r.json())
    assert all(b == bodies[0] for b in bodies), bodies


def test_open_paths_and_metrics(prepared: SecureGateway) -> None:
    anonymous = prepared.client()
    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/openapi.json").status_code == 200
    assert anonymous.get("/metrics").status_code == 401
    assert prepared.client("alice").get("/metrics").status_code == 403
    assert prepared.client("admin").get("/metrics").status_code == 200


def test_deny_overrides_allow(sg: SecureGateway) -> None:
    sg.allow("User:alice", Operation.ALL, T, "orders")
    sg.allow("User:alice", Operation.WRITE, T, "orders", permission=Permission.DENY)
    alice = sg.client("alice")
    assert alice.get("/v1/topics/orders/partitions/0/records?offset=0&wait_ms=0").status_code == 200
    assert alice.post("/v1/topics/orders/records", json={"records": [{"value": "x"}]}).status_code == 403


def test_prefixed_patterns_and_wildcard_principal(sg: SecureGateway) -> None:
    sg.allow("User:*", Operation.DESCRIBE, T, "ord", pattern=PatternType.PREFIXED)
    bob = sg.client("bob")
    assert bob.get("/v1/topics/orders").status_code == 200
    assert bob.get("/v1/topics/secret").status_code == 403


def test_super_user_needs_no_acl(sg: SecureGateway) -> None:
    admin = sg.client("admin")
    assert admin.get("/v1/topics/secret").status_code == 200
    assert admin.post("/v1/topics/secret/records", json={"records": [{"value": "x"}]}).status_code == 200


def test_listings_are_filtered(sg: SecureGateway) -> None:
    sg.allow("User:alice", Operation.READ, T, "orders")  # Read implies Describe
    alice = sg.client("alice")
    assert [t["name"] for t in alice.get("/v1/topics").json()["topics"]] == ["orders"]
    assert alice.get("/topics", headers={"accept": V2}).json() == ["orders"]
    v3 = alice.get(f"/v3/clusters/{sg.cluster_id}/topics").json()
    assert [t["topic_name"] for t in v3["data"]] == ["orders"]
    assert [t["name"] for t in alice.get("/v1/metadata").json()["topics"]] == ["orders"]
    assert alice.get(f"/v3/clusters/{sg.cluster_id}/topics/-/configs").json()["data"] == []
    assert alice.get("/v1/groups").json()["groups"] == []


@pytest.mark.parametrize("rs256", [False, True])
def test_bearer_tokens(sg: SecureGateway, rs256: bool) -> None:
    sg.allow("User:svc", Operation.DESCRIBE, T, "orders")
    good = sg.client(Authorization=f"Bearer {sg.token('svc', rs256=rs256)}")
    assert good.get("/v1/topics/orders").status_code == 200
    assert good.get("/v1/topics/secret").status_code == 403
    expired = sg.client(Authorization=f"Bearer {sg.token('svc', rs256=rs256, exp_s=-300)}")
    assert expired.get("/v1/topics/orders").status_code == 401


def test_a_forged_principal_header_is_ignored(sg: SecureGateway) -> None:
    forged = sg.client(**{"x-topiclake-principal": "v1.eyJ0IjogIlVzZXIiLCAibiI6ICJhZG1pbiJ9.00"})
    assert forged.get("/v1/topics/secret").status_code == 401
    forged = sg.client("alice", **{"x-topiclake-principal": "v1.eyJ0IjogIlVzZXIiLCAibiI6ICJhZG1pbiJ9.00"})
    assert forged.get("/v1/topics/secret").status_code == 403


def test_group_commit_needs_read_on_each_topic(sg: SecureGateway) -> None:
    sg.allow("User:alice", Operation.READ, G, "g9")
    alice = sg.client("alice")
    body = {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}
    assert alice.post("/v1/groups/g9/offsets", json=body).status_code == 403
    sg.allow("User:alice", Operation.READ, T, "orders")
    assert alice.post("/v1/groups/g9/offsets", json=body).status_code == 200


def test_v3_acl_routes(sg: SecureGateway) -> None:
    base = f"/v3/clusters/{sg.cluster_id}/acls"
    acl = {
        "resource_type": "TOPIC",
        "resource_name": "team-",
        "pattern_type": "PREFIXED",
        "principal": "User:bob",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    bob, admin = sg.client("bob"), sg.client("admin")
    assert bob.post(base, json=acl).status_code == 403  # needs Alter on the cluster
    assert admin.post(base, json=acl).status_code == 201
    batch = {
        "data": [{**acl, "operation": "WRITE"}, {**acl, "resource_name": "x", "pattern_type": "LITERAL"}]
    }
    assert admin.post(f"{base}:batch", json=batch).status_code == 204
    listed = admin.get(base, params={"principal": "User:bob"}).json()
    assert listed["kind"] == "KafkaAclDataList" and len(listed["data"]) == 3
    assert listed["data"][0]["kind"] == "KafkaAcl" and listed["data"][0]["cluster_id"] == sg.cluster_id
    match = admin.get(
        base, params={"resource_type": "TOPIC", "resource_name": "team-a", "pattern_type": "MATCH"}
    )
    assert {a["operation"] for a in match.json()["data"]} == {"READ", "WRITE"}
    assert admin.get(base, params={"operation": "FLY"}).status_code == 400
    gone = admin.delete(base, params={"principal": "User:bob", "operation": "WRITE"}).json()["data"]
    assert [a["operation"] for a in gone] == ["WRITE"]
    assert len(admin.get(base).json()["data"]) == 2
    sg.allow("User:bob", Operation.ALTER, C, "kafka-cluster")
    assert bob.delete(base, params={"principal": "User:bob"}).status_code == 200
    assert admin.get(base, params={"principal": "User:bob"}).json()["data"] == []


def test_v2_consumer_needs_read_on_its_topics(sg: SecureGateway) -> None:
    sg.allow("User:alice", Operation.READ, G, "g7")
    alice = sg.client("alice")
    h = {"content-type": V2}
    r = alice.post("/consumers/g7", json={"name": "c7", "format": "binary"}, headers=h)
    assert r.status_code == 200, r.text
    base = "/consumers/g7/instances/c7"
    assert alice.post(f"{base}/subscription", json={"topics": ["orders"]}, headers=h).status_code == 403
    sg.allow("User:alice", Operation.READ, T, "orders")
    assert alice.post(f"{base}/subscription", json={"topics": ["orders"]}, headers=h).status_code == 204
    accept = {"accept": "application/vnd.kafka.binary.v2+json"}
    assert alice.get(f"{base}/records", params={"timeout": 0}, headers=accept).status_code == 200
    assert alice.delete(base, headers=h).status_code == 204


def test_cross_origin_posts_are_refused(sg: SecureGateway) -> None:
    sg.allow("User:alice", Operation.WRITE, T, "orders")
    alice = sg.client("alice")
    body = {"records": [{"value": "x"}]}
    evil = alice.post("/v1/topics/orders/records", json=body, headers={"origin": "https://evil.example"})
    assert evil.status_code == 403
    host = sg.gw.url.removeprefix("http://")
    same = alice.post("/v1/topics/orders/records", json=body, headers={"origin": f"http://{host}"})
    assert same.status_code == 200
    assert alice.get("/v1/topics/orders", headers={"origin": "https://evil.example"}).status_code == 200


def test_produce_creates_a_topic_only_with_create(sg: SecureGateway) -> None:
    """auto.create.topics.enable with auth: Write alone finds no topic (404, nothing created); Create on the
    topic (or the cluster) lets a produce create it, as Kafka's Metadata rule does."""
    sg.allow("User:alice", Operation.WRITE, T, "auto.", pattern=PatternType.PREFIXED)
    sg.allow("User:alice", Operation.DESCRIBE, T, "auto.", pattern=PatternType.PREFIXED)
    alice = sg.client("alice")
    assert alice.post("/v1/topics/auto.a/records", json={"records": [{"value": 1}]}).status_code == 404
    assert "auto.a" not in {t.name for t in sg.gw.broker.list_topics()}
    sg.allow("User:alice", Operation.CREATE, T, "auto.a")
    r = alice.post("/v1/topics/auto.a/records", json={"records": [{"value": 1}]})
    assert r.status_code == 200, r.text
    assert sg.gw.broker.describe_topic("auto.a").partitions == 1  # num_partitions
