"""Client quotas per principal (issue 13): the token buckets, and 429 + Retry-After on a real gateway."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway, table_rows

from topiclake.errors import InvalidConfig
from topiclake.security.quotas import QuotaKind, QuotaLimits, Quotas, quotas_from_settings

USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "dave": "dave-pw"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_goes_into_debt_and_pays_it_back_at_its_rate() -> None:
    clock = Clock()
    quotas = Quotas(QuotaLimits(produce_bytes_per_s=1000), clock=clock)
    assert quotas.enabled
    assert quotas.throttle_ms("User:a", QuotaKind.PRODUCE) == 0
    assert quotas.record("User:a", QuotaKind.PRODUCE, 800) == 0  # within the one-second burst
    assert quotas.record("User:a", QuotaKind.PRODUCE, 700) == 500  # 500 bytes of debt at 1000 B/s
    assert quotas.throttle_ms("User:a", QuotaKind.PRODUCE) == 500
    assert quotas.throttle_ms("User:b", QuotaKind.PRODUCE) == 0  # another principal: its own bucket
    assert quotas.throttle_ms("User:a", QuotaKind.PRODUCE, client="10.0.0.2") == 0  # another client
    clock.now += 0.25
    assert quotas.throttle_ms("User:a", QuotaKind.PRODUCE) == 250
    clock.now += 0.25
    assert quotas.throttle_ms("User:a", QuotaKind.PRODUCE) == 0
    assert quotas.throttle_ms("User:a", QuotaKind.FETCH) == 0  # unlimited kind
    assert quotas.record("User:a", QuotaKind.FETCH, 10**9) == 0


def test_overrides_keep_the_defaults_they_omit() -> None:
    quotas = quotas_from_settings(0, 500, 0, {"User:alice": {"produce_bytes_per_s": 10}})
    assert quotas.limits("User:alice") == QuotaLimits(10, 500, 0)
    assert quotas.limits("User:bob") == QuotaLimits(0, 500, 0)
    assert not Quotas().enabled
    with pytest.raises(InvalidConfig, match="unknown quota"):
        quotas_from_settings(0, 0, 0, {"User:x": {"bytes": 1}})


@pytest.fixture(scope="module")
def quota_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from topiclake.security import UserStore

    root = tmp_path_factory.mktemp("quotas")
    store = UserStore(root / "users.htpasswd")
    for name, pw in USERS.items():
        store.add(name, pw)
    gw, server, thread = start_gateway(
        root / "wh",
        settings_overrides={
            "auth": True,
            "users_file": str(root / "users.htpasswd"),
            "super_users": [f"User:{u}" for u in USERS],
            "quota_overrides": {
                "User:alice": {"produce_bytes_per_s": 3000},
                "User:carol": {"request_rate": 4},
                "User:dave": {"fetch_bytes_per_s": 4000},
            },
        },
    )
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)


def _client(gw: Gateway, user: str) -> httpx.Client:
    return httpx.Client(base_url=gw.url, auth=(user, USERS[user]), timeout=30)


def test_over_its_produce_quota_a_principal_gets_429_and_keeps_what_was_acked(quota_gw: Gateway) -> None:
    with _client(quota_gw, "alice") as alice, _client(quota_gw, "bob") as bob:
        assert alice.post("/v1/topics", json={"name": "quota-orders"}).status_code == 201
        acknowledged: list[str] = []
        refused = None
        for i in range(30):  # ~2.5 KB a request against 3000 B/s: refused within a few requests
            value = f"alice-{i}-" + "x" * 2_500
            r = alice.post("/v1/topics/quota-orders/records", json={"records": [{"value": value}]})
            if r.status_code == 429:
                refused = r
                break
            assert r.status_code == 200, r.text
            acknowledged.append(value)
        assert refused is not None, "alice was never throttled"
        assert 1 <= len(acknowledged) < 10
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "throttled"
        # the REST Proxy routes answer Confluent's shape while alice is in debt
        v2 = alice.post(
            "/topics/quota-orders",
            json={"records": [{"value": "v2"}]},
            headers={"content-type": "application/vnd.kafka.json.v2+json"},
        )
        assert v2.status_code == 429 and v2.json()["error_code"] == 42901, v2.text
        # another principal is unaffected
        for i in range(5):
            record = {"value": f"bob-{i}-" + "y" * 600}
            r = bob.post("/v1/topics/quota-orders/records", json={"records": [record]})
            assert r.status_code == 200, r.text
        # every record acknowledged before the refusal is in the table, and none of the refused ones
        values = {json.loads(v) for v in table_rows(quota_gw, "quota-orders").column("value").to_pylist()}
        assert set(acknowledged) <= values
        assert not any(v == "v2" for v in values)
        # after Retry-After, alice may produce again
        time.sleep(int(refused.headers["retry-after"]))
        r = alice.post("/v1/topics/quota-orders/records", json={"records": [{"value": "again"}]})
        assert r.status_code == 200, r.text


def test_request_rate_quota_refuses_before_routing_and_spares_the_probes(quota_gw: Gateway) -> None:
    with _client(quota_gw, "carol") as carol:
        statuses: list[int] = []
        for _ in range(40):  # 4 requests/s: refused within a few quick requests
            statuses.append(carol.get("/v1/topics").status_code)
            if statuses[-1] == 429:
                break
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        assert carol.get("/healthz").status_code == 200
        with _client(quota_gw, "bob") as bob:
            assert bob.get("/v1/topics").status_code == 200


def test_fetch_quota_counts_the_answers_bytes(quota_gw: Gateway) -> None:
    with _client(quota_gw, "dave") as dave:
        assert dave.post("/v1/topics", json={"name": "quota-reads"}).status_code == 201
        records = [{"value": "z" * 500} for _ in range(6)]  # ~3 KB an answer against 4000 B/s
        assert dave.post("/v1/topics/quota-reads/records", json={"records": records}).status_code == 200
        statuses = []
        for _ in range(6):
            r = dave.get("/v1/topics/quota-reads/partitions/0/records", params={"offset": 0})
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
                break
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        # producing is another kind: dave is not throttled for it
        produced = dave.post("/v1/topics/quota-reads/records", json={"records": [{"value": 1}]})
        assert produced.status_code == 200
