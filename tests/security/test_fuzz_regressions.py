"""Regressions found by fuzzing the HTTP APIs (issue 13), each on a real gateway.

The first: an error body that echoes a client's integer beyond 64 bits (``partitions:
-30998723762299437056``) made orjson fail in the error handler itself, so the client got a 500.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway

from topiclake.errors import InvalidPartitions, json_safe

HUGE = -30998723762299437056


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway, server, thread = start_gateway(tmp_path_factory.mktemp("fuzzreg") / "wh")
    try:
        yield gateway
    finally:
        stop_gateway(gateway, server, thread)


def test_json_safe_turns_what_orjson_refuses_into_strings() -> None:
    value = {1: HUGE, "f": float("nan"), "l": [2**64, b"\xff", (1, 2)], "ok": 5}
    safe = json_safe(value)
    assert safe == {"1": str(HUGE), "f": "nan", "l": [str(2**64), "\ufffd", [1, 2]], "ok": 5}
    orjson.dumps(safe)
    assert InvalidPartitions("bad", partitions=HUGE).to_dict()["details"] == {"partitions": str(HUGE)}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/topics", {"name": "orders", "partitions": HUGE}),  # the issue's own case
        ("POST", "/v1/topics", {"name": "orders", "partitions": 1, "replication_factor": HUGE}),
        ("POST", "/v1/topics/orders/partitions", {"count": HUGE}),
        ("POST", "/v3/clusters/{cid}/topics", {"topic_name": "orders", "partitions_count": HUGE}),
        ("POST", "/topics/orders/partitions/0", {"records": [{"value": 1, "partition": HUGE}]}),
        ("POST", "/topics/orders", {"records": [{"value": 1, "partition": HUGE}]}),
        ("GET", f"/v1/topics/orders/partitions/{HUGE}/records", None),
        ("GET", f"/v3/clusters/{{cid}}/topics/orders/partitions/{HUGE}", None),
        # found by tests/security/test_fuzz_api.py before the fix (same root: details echoing the input)
        ("GET", f"/v1/topics/orders/partitions/0/records?offset={HUGE}", None),
        ("POST", "/v1/groups/g1/members/m1/heartbeat", {"generation_id": HUGE}),
        ("POST", "/v1/groups/g1/offsets", {"offsets": [{"topic": "orders", "partition": 0, "offset": HUGE}]}),
        ("POST", "/v1/groups/g1/offsets", {"offsets": [{"topic": "orders", "partition": HUGE, "offset": 1}]}),
    ],
)
def test_huge_integers_are_refused_not_500(gw: Gateway, method: str, path: str, body: object) -> None:
    if gw.client.get("/v1/topics/orders").status_code == 404:
        assert gw.client.post("/v1/topics", json={"name": "orders"}).status_code == 201
        assert (
            gw.client.post("/v1/topics/orders/records", json={"records": [{"value": 1}]}).status_code == 200
        )
    cid = gw.client.get("/v3/clusters").json()["data"][0]["cluster_id"]
    path = path.replace("{cid}", cid)
    kind = "vnd.kafka.json.v2+json" if path.startswith("/topics") else "json"
    headers = {"content-type": f"application/{kind}"}
    r = gw.client.request(method, path, content=json.dumps(body) if body else None, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text)
    assert r.json()  # refused (4xx), or a v2 produce answering the record's error in its offsets (200)
    if r.status_code == 200:
        assert r.json()["offsets"][0]["error_code"] is not None or path.endswith("/partitions/0")
