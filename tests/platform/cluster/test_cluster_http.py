"""Any broker of a cluster answers for the whole cluster over HTTP: metadata, produce and fetch for every
partition (forwarded to its leader), REST Proxy v2 and v3 views of brokers, partitions and replicas."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from cluster_procs import Cluster, until

from topiclake.platform.cluster.routing import FORWARDED_HEADER
from topiclake.process.ports import free_port

V2 = "application/vnd.kafka.v2+json"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster-http")
    c = Cluster(tmp / "wh", tmp)
    try:
        for i in (1, 2, 3):
            c.start(i)
        until(lambda: all(len(c.metadata(b)["brokers"]) == 3 for b in (1, 2, 3)), what="3 brokers")
        r = httpx.post(f"{c.brokers[2].url}/v1/topics", json={"name": "web", "partitions": 6}, timeout=30)
        assert r.status_code == 201, r.text
        until(lambda: all(len(c.leaders("web", b)) == 6 for b in (1, 2, 3)), what="leaders everywhere")
        yield c
    finally:
        c.stop_all()


def test_every_broker_reports_the_same_cluster(cluster: Cluster) -> None:
    metas = [cluster.metadata(b) for b in (1, 2, 3)]
    controllers = {m["controller_id"] for m in metas}
    assert len(controllers) == 1 and controllers <= {1, 2, 3}
    expected = [(i, cluster.brokers[i].port) for i in (1, 2, 3)]
    for m in metas:
        assert [(b["id"], b["port"]) for b in m["brokers"]] == expected
        assert m["topics"] == metas[0]["topics"]
    parts = metas[0]["topics"][0]["partitions"]
    assert sorted(p["leader"] for p in parts) == [1, 1, 2, 2, 3, 3]
    for b in (1, 2, 3):
        url = cluster.brokers[b].url
        assert httpx.get(f"{url}/brokers", headers={"Accept": V2}).json() == {"brokers": [1, 2, 3]}
        v2 = httpx.get(f"{url}/topics/web/partitions", headers={"Accept": V2}).json()
        assert [p["leader"] for p in v2] == [p["leader"] for p in parts]
        assert all(len(p["replicas"]) == 3 and all(r["in_sync"] for r in p["replicas"]) for p in v2)
        cid = m["cluster_id"]
        v3 = httpx.get(f"{url}/v3/clusters/{cid}/brokers").json()
        assert [d["broker_id"] for d in v3["data"]] == [1, 2, 3]
        replicas = httpx.get(f"{url}/v3/clusters/{cid}/topics/web/partitions/0/replicas").json()["data"]
        assert sum(r["is_leader"] for r in replicas) == 1 and len(replicas) == 3


def test_any_broker_produces_and_fetches_every_partition(cluster: Cluster) -> None:
    records = [{"key": f"k{i}", "value": i} for i in range(60)]
    r = httpx.post(f"{cluster.brokers[1].url}/v1/topics/web/records", json={"records": records}, timeout=30)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert all(res["error"] is None and res["offset"] is not None for res in results)
    assert len({res["partition"] for res in results}) == 6  # keys spread over every leader
    for b in (2, 3):
        got = {}
        for p in range(6):
            fetched = httpx.get(
                f"{cluster.brokers[b].url}/v1/topics/web/partitions/{p}/records",
                params={"offset": 0, "encoding": "json", "max_records": 1000},
                timeout=30,
            ).json()
            for rec in fetched["records"]:
                got[rec["key"]] = (p, rec["offset"], rec["value"])
        assert got == {f"k{i}": (res["partition"], res["offset"], i) for i, res in enumerate(results)}
        offsets = httpx.get(f"{cluster.brokers[b].url}/v1/topics/web/partitions/0/offsets", timeout=30).json()
        assert offsets["end_offset"] == sum(1 for res in results if res["partition"] == 0)


def test_a_forwarded_request_to_a_non_leader_says_who_leads(cluster: Cluster) -> None:
    leaders = cluster.leaders("web", 1)
    p, leader = next((p, b) for p, b in leaders.items() if b != 1)
    r = httpx.post(
        f"{cluster.brokers[1].url}/v1/topics/web/records",
        params={"partition": p},
        json={"records": [{"value": 1}]},
        headers={FORWARDED_HEADER: "9"},
        timeout=30,
    )
    err = r.json()["results"][0]["error"]
    assert err["code"] == "not_leader"
    r = httpx.get(
        f"{cluster.brokers[1].url}/v1/topics/web/partitions/{p}/records",
        params={"offset": 0},
        headers={FORWARDED_HEADER: "9"},
        timeout=30,
    )
    assert r.status_code == 421 and r.json()["error"]["details"]["leader_id"] == leader


def test_a_forwarded_producer_keeps_each_partitions_own_sequence_numbers(cluster: Cluster) -> None:
    """A Kafka producer numbers each partition from 0; its request for two partitions of one leader,
    taken by a broker leading neither, is forwarded with the partition as the sequence's scope. Without it
    the leader took the second partition's batch for a retry of the first: acknowledged, never written
    (the consumer group "stall" of tests/cluster/test_kafka_failover.py)."""
    leaders = cluster.leaders("web", 1)
    entry = 1
    other = next(b for b in leaders.values() if b != entry)
    parts = [p for p, b in sorted(leaders.items()) if b == other][:2]
    pid = httpx.post(f"{cluster.brokers[entry].url}/v1/producers", timeout=30).json()["producer_id"]
    for p in parts:
        body = {"producer": {"id": pid, "epoch": 0, "sequence": 0, "scope": p}, "records": [{"value": p}]}
        url = f"{cluster.brokers[entry].url}/v1/topics/web/records"
        r = httpx.post(url, params={"partition": p}, json=body, timeout=30)
        assert r.status_code == 200 and r.json()["results"][0]["error"] is None, r.text
    for p in parts:
        fetched = httpx.get(
            f"{cluster.brokers[entry].url}/v1/topics/web/partitions/{p}/records",
            params={"offset": 0, "encoding": "json", "max_records": 1000},
            timeout=30,
        ).json()
        assert p in [rec["value"] for rec in fetched["records"]], fetched


def test_replication_factor_above_the_live_brokers_is_refused(cluster: Cluster) -> None:
    body = {"name": "wide", "partitions": 1, "configs": {"replication.factor": "4"}}
    r = httpx.post(f"{cluster.brokers[1].url}/v1/topics", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_replication_factor"


def test_a_second_broker_with_a_live_id_exits_with_a_clear_error(cluster: Cluster) -> None:
    cmd = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(cluster.warehouse)]
    out = subprocess.run(
        [*cmd, "--port", str(free_port()), "--broker-id", "2"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert "broker id 2 is held by a live broker" in out.stdout + out.stderr
