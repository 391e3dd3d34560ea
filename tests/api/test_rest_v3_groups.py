"""Confluent REST Proxy v3 consumer groups, consumers, assignments, lags and lag summary, end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_harness import start_gateway, stop_gateway
from test_rest_v2_consumers import Consumers, drain, open_consumers, produce, until


@pytest.fixture
def consumers(tmp_path: Path) -> Iterator[Consumers]:
    gw, server, thread = start_gateway(tmp_path / "wh")
    c = open_consumers(gw, server)
    try:
        yield c
    finally:
        c.manager.close()
        stop_gateway(gw, server, thread)


def _get(c: Consumers, path: str) -> dict[str, Any]:
    r = c.client.get(path, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _assert_404(r: httpx.Response) -> None:
    assert r.status_code == 404, r.text
    assert set(r.json()) == {"error_code", "message"} and r.json()["error_code"] == 404


@pytest.fixture
def lagging(consumers: Consumers) -> tuple[Consumers, str]:
    """Group 'g' with one member 'a' that read everything and committed so that the lags are
    p0: 10 - 2 = 8, p1: 3 - 1 = 2, p2: 7 - 7 = 0 (p3: nothing committed)."""
    c = consumers
    c.gw.broker.create_topic("t", partitions=4)
    produce(c, "t", {0: 10, 1: 3, 2: 7})
    base = c.create("g", "a", **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    c.subscribe(base, "t")
    until(lambda: len(c.assignment(base)) == 4, what="the assignment")
    assert len(drain(c, base)) == 20
    r = c.post(
        f"{base}/offsets",
        {
            "offsets": [
                {"topic": "t", "partition": 0, "offset": 1},
                {"topic": "t", "partition": 1, "offset": 0},
                {"topic": "t", "partition": 2, "offset": 6},
            ]
        },
    )
    assert r.status_code == 200, r.text
    return c, base


def test_groups_and_consumers(lagging: tuple[Consumers, str]) -> None:
    c, _ = lagging
    cid = c.gw.broker.cluster_id
    root = f"{c.gw.url}/v3/clusters/{cid}"

    listing = _get(c, f"/v3/clusters/{cid}/consumer-groups")
    assert listing["kind"] == "KafkaConsumerGroupList"
    assert listing["metadata"]["self"] == f"{root}/consumer-groups"
    [group] = listing["data"]
    expected = {
        "kind": "KafkaConsumerGroup",
        "metadata": {
            "self": f"{root}/consumer-groups/g",
            "resource_name": f"crn:///kafka={cid}/consumer-group=g",
        },
        "cluster_id": cid,
        "consumer_group_id": "g",
        "is_simple": False,
        "partition_assignor": "range",
        "state": "STABLE",
        "type": "CLASSIC",
        "is_mixed_consumer_group": False,
        "coordinator": {"related": f"{root}/brokers/{c.gw.broker.config.broker_id}"},
        "consumers": {"related": f"{root}/consumer-groups/g/consumers"},
        "lag_summary": {"related": f"{root}/consumer-groups/g/lag-summary"},
    }
    assert group == expected
    assert _get(c, f"/v3/clusters/{cid}/consumer-groups/g") == expected

    members = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers")
    assert members["kind"] == "KafkaConsumerList"
    [member] = members["data"]
    mid = member["consumer_id"]
    assert member == {
        "kind": "KafkaConsumer",
        "metadata": {
            "self": f"{root}/consumer-groups/g/consumers/{mid}",
            "resource_name": f"crn:///kafka={cid}/consumer-group=g/consumer={mid}",
        },
        "cluster_id": cid,
        "consumer_group_id": "g",
        "consumer_id": mid,
        "instance_id": None,
        "client_id": "a",
        "assignments": {"related": f"{root}/consumer-groups/g/consumers/{mid}/assignments"},
    }
    assert _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers/{mid}") == member

    assignments = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers/{mid}/assignments")
    assert assignments["kind"] == "KafkaConsumerAssignmentList"
    assert [(a["topic_name"], a["partition_id"]) for a in assignments["data"]] == [("t", p) for p in range(4)]
    first = assignments["data"][0]
    assert first["kind"] == "KafkaConsumerAssignment"
    assert first["metadata"]["self"] == f"{root}/consumer-groups/g/consumers/{mid}/assignments/t/partitions/0"
    assert first["partition"] == {"related": f"{root}/topics/t/partitions/0"}
    assert first["lag"] == {"related": f"{root}/consumer-groups/g/lags/t/partitions/0"}
    one = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers/{mid}/assignments/t/partitions/0")
    assert one == first


def test_lags_sorted_by_lag_and_lag_summary(lagging: tuple[Consumers, str]) -> None:
    c, _ = lagging
    cid = c.gw.broker.cluster_id
    root = f"{c.gw.url}/v3/clusters/{cid}"
    mid = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers")["data"][0]["consumer_id"]

    lags = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lags")
    assert lags["kind"] == "KafkaConsumerLagList"
    assert lags["metadata"]["self"] == f"{root}/consumer-groups/g/lags"
    rows = [(x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"]) for x in lags["data"]]
    assert rows == [(0, 2, 10, 8), (1, 1, 3, 2), (2, 7, 7, 0)]  # lag = end - committed, largest first
    first = lags["data"][0]
    assert first == {
        "kind": "KafkaConsumerLag",
        "metadata": {
            "self": f"{root}/topics/t/partitions/0/lags/g",
            "resource_name": f"crn:///kafka={cid}/topic=t/partition=0/lag=g",
        },
        "cluster_id": cid,
        "consumer_group_id": "g",
        "topic_name": "t",
        "partition_id": 0,
        "current_offset": 2,
        "log_end_offset": 10,
        "lag": 8,
        "consumer_id": mid,
        "instance_id": None,
        "client_id": "a",
    }
    assert _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lags/t/partitions/0") == first
    assert _get(c, f"/v3/clusters/{cid}/topics/t/partitions/0/lags/g") == first  # its self link resolves

    summary = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lag-summary")
    assert summary == {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": {
            "self": f"{root}/consumer-groups/g/lag-summary",
            "resource_name": f"crn:///kafka={cid}/consumer-group=g/lag-summary",
        },
        "cluster_id": cid,
        "consumer_group_id": "g",
        "max_lag_consumer_id": mid,
        "max_lag_instance_id": None,
        "max_lag_client_id": "a",
        "max_lag_topic_name": "t",
        "max_lag_partition_id": 0,
        "max_lag": 8,
        "total_lag": 10,
        "max_lag_consumer": {"related": f"{root}/consumer-groups/g/consumers/{mid}"},
        "max_lag_partition": {"related": f"{root}/topics/t/partitions/0"},
    }

    # more records: the lag grows by as many
    produce(c, "t", {1: 20}, start=3)
    grown = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lags")["data"]
    assert [(x["partition_id"], x["lag"]) for x in grown] == [(1, 22), (0, 8), (2, 0)]
    assert _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lag-summary")["total_lag"] == 30


def test_an_empty_group_keeps_its_offsets_and_lags(lagging: tuple[Consumers, str]) -> None:
    c, base = lagging
    cid = c.gw.broker.cluster_id
    assert c.client.delete(base).status_code == 204
    group = _get(c, f"/v3/clusters/{cid}/consumer-groups/g")
    assert group["state"] == "EMPTY"
    assert _get(c, f"/v3/clusters/{cid}/consumer-groups/g/consumers")["data"] == []
    lags = _get(c, f"/v3/clusters/{cid}/consumer-groups/g/lags")["data"]
    assert [(x["partition_id"], x["lag"], x["consumer_id"], x["client_id"]) for x in lags] == [
        (0, 8, "", ""),
        (1, 2, "", ""),
        (2, 0, "", ""),
    ]


def test_unknown_things_are_404(consumers: Consumers) -> None:
    c = consumers
    cid = c.gw.broker.cluster_id
    c.gw.broker.create_topic("t")
    base = c.create("fresh", "a")
    c.subscribe(base, "t")
    _assert_404(c.client.get("/v3/clusters/other/consumer-groups"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/nope"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/nope/consumers"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/fresh/consumers/nobody"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/fresh/consumers/nobody/assignments"))
    # a group that never committed has no lags (Confluent: 404)
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/fresh/lags"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/fresh/lag-summary"))
    _assert_404(c.client.get(f"/v3/clusters/{cid}/consumer-groups/fresh/lags/t/partitions/9"))
