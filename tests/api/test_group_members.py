"""Start positions of a group's consumers, and static members leaving by group.instance.id (native, v3)."""

from __future__ import annotations

from gateway_harness import Gateway

from topiclake.platform import Record

BASE = 1_767_225_600_000


def _setup(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    gateway.broker.produce("t", [Record(value=b"a", timestamp_ms=BASE + i) for i in range(5)], partition=0)
    gateway.broker.produce(
        "t", [Record(value=b"b", timestamp_ms=BASE + 10 * i) for i in range(3)], partition=1
    )
    gateway.broker.groups.commit("g", None, -1, {("t", 0): 2})


def _positions(gateway: Gateway, **params: object) -> dict[int, tuple[int, str]]:
    r = gateway.client.get("/v1/groups/g/positions", params={"topic": "t", **params})
    assert r.status_code == 200, r.text
    assert r.json()["group"] == "g"
    return {x["partition"]: (x["offset"], x["source"]) for x in r.json()["positions"]}


def test_start_positions_by_commit_reset_and_timestamp(gateway: Gateway) -> None:
    _setup(gateway)
    assert _positions(gateway) == {0: (2, "committed"), 1: (3, "latest")}
    assert _positions(gateway, reset="earliest") == {0: (2, "committed"), 1: (0, "earliest")}
    assert _positions(gateway, timestamp=BASE + 15) == {0: (2, "committed"), 1: (2, "timestamp")}
    assert _positions(gateway, timestamp=BASE + 10**6, partition=1) == {1: (3, "timestamp")}
    # a new group, nothing committed anywhere
    r = gateway.client.get("/v1/groups/new/positions", params={"topic": "t", "reset": "earliest"})
    assert [x["offset"] for x in r.json()["positions"]] == [0, 0]
    # none: a partition without a usable commit is an error, as for a Kafka consumer
    r = gateway.client.get("/v1/groups/g/positions", params={"topic": "t", "reset": "none"})
    assert r.status_code == 416 and r.json()["error"]["code"] == "no_offset_for_partition", r.text
    assert _positions(gateway, reset="none", partition=0) == {0: (2, "committed")}
    assert (
        gateway.client.get("/v1/groups/g/positions", params={"topic": "t", "partition": 9}).status_code == 404
    )
    assert gateway.client.get("/v1/groups/g/positions", params={"topic": "nope"}).status_code == 404
    assert (
        gateway.client.get("/v1/groups/g/positions", params={"topic": "t", "reset": "x"}).status_code == 422
    )


def _join(gateway: Gateway, instance: str) -> str:
    r = gateway.client.post(
        "/v1/groups/s/members",
        json={"topics": ["t"], "group_instance_id": instance, "session_timeout_ms": 30000},
    )
    assert r.status_code == 200, r.text
    return str(r.json()["member_id"])


def _instances(gateway: Gateway) -> set[str]:
    return {m["group_instance_id"] for m in gateway.client.get("/v1/groups/s").json()["members"]}


def test_static_member_leaves_by_instance_id(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    _join(gateway, "a")
    _join(gateway, "b")
    assert _instances(gateway) == {"a", "b"}
    r = gateway.client.delete("/v1/groups/s/instances/a")
    assert r.status_code == 204, r.text
    assert _instances(gateway) == {"b"}
    r = gateway.client.delete("/v1/groups/s/instances/a")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_member_id"
    assert gateway.client.delete("/v1/groups/nope/instances/a").status_code == 404


def test_v3_removes_consumers_by_id_and_by_instance(gateway: Gateway) -> None:
    gateway.broker.create_topic("t", partitions=2)
    cid = gateway.client.get("/v3/clusters").json()["data"][0]["cluster_id"]
    _join(gateway, "a")
    member_b = _join(gateway, "b")
    base = f"/v3/clusters/{cid}/consumer-groups/s"
    assert gateway.client.delete(f"{base}/instances/a").status_code == 204
    assert gateway.client.delete(f"{base}/consumers/{member_b}").status_code == 204
    assert _instances(gateway) == set()
    gone = gateway.client.delete(f"{base}/consumers/{member_b}")
    assert gone.status_code == 404 and gone.json()["error_code"] == 404
    assert gateway.client.delete("/v3/clusters/other/consumer-groups/s/instances/a").status_code == 404
