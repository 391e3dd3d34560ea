"""The client and the CLI against a real cluster of three ``topiclake serve`` brokers over one warehouse.

Marked ``cluster``: they need the server side of issue 12 (heartbeats, controller, partition leaders,
forwarding, ``not_leader``). Before it, brokers on one warehouse do not form a cluster and these fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import STORES, BrokerProcess, bootstrap, wait_for
from deltalake import DeltaTable

from topiclake.client import Metadata, TopiclakeClient

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PARTITIONS = 6
THREADS = 4
BATCH = 5


def metadata(b: BrokerProcess) -> Metadata:
    with TopiclakeClient(b.url, timeout=5) as tl:
        return tl.metadata()


def leaders(meta: Metadata, topic: str) -> dict[int, int]:
    (t,) = [t for t in meta["topics"] if t["name"] == topic]
    return {p["partition"]: p["leader"] for p in t["partitions"]}


def cluster_of(brokers: list[BrokerProcess], topic: str | None = None) -> Callable[[], bool]:
    """True once every live broker reports all live brokers (and every partition of ``topic`` led by one)."""
    live = {b.broker_id for b in brokers if b.alive}

    def ready() -> bool:
        for b in brokers:
            if not b.alive:
                continue
            try:
                meta = metadata(b)
            except Exception:
                return False
            if {x["id"] for x in meta["brokers"]} != live:
                return False
            if topic is not None:
                try:
                    if not set(leaders(meta, topic).values()) <= live:
                        return False
                except ValueError:
                    return False
        return True

    return ready


def test_every_broker_answers_metadata_for_the_whole_cluster(
    start_brokers: Callable[..., list[BrokerProcess]],
) -> None:
    brokers = start_brokers(3)
    wait_for(cluster_of(brokers), 15, "three brokers in every broker's metadata")
    with TopiclakeClient(bootstrap_servers=bootstrap(brokers), timeout=10) as tl:
        tl.create_topic("spread", partitions=PARTITIONS, replication_factor=3)
    wait_for(cluster_of(brokers, "spread"), 15, "leaders for every partition")
    metas = [metadata(b) for b in brokers]
    assert len({m["controller_id"] for m in metas}) == 1
    spread = leaders(metas[0], "spread")
    assert set(spread.values()) == {1, 2, 3}, spread  # leaders balanced across the brokers
    for p in metas[0]["topics"][0]["partitions"]:
        assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["in_sync_replicas"]) == [1, 2, 3]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_taken_broker_id_is_refused(
    start_brokers: Callable[..., list[BrokerProcess]], tmp_path: Path
) -> None:
    (first,) = start_brokers(1)
    twin = BrokerProcess(first.warehouse, 1, tmp_path / "twin.log", env=first.env)
    env = {**os.environ, **twin.env}
    proc = subprocess.Popen(twin.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # by its pid; it took the id instead of refusing it
        proc.communicate(timeout=10)
        pytest.fail("a second broker with id 1 was not refused within 30 s")
    assert proc.returncode == 1, out[-2000:]
    said = out.lower()
    assert "broker" in said and "1" in said and "traceback" not in said, said[-2000:]


def test_kill9_of_a_broker_while_four_clients_produce(
    start_brokers: Callable[..., list[BrokerProcess]], store: str
) -> None:
    """Issue 12's safety test, from the client's side: every acknowledged record exactly once, offsets
    contiguous, producing (also to the partitions that moved) resumes within 10 s of the kill. On a
    directory only: the client's side does not depend on the store, and the same kill -9 of a leader while
    four clients produce is proven on S3 by tests/platform/cluster/test_failover.py (docs/decisions.md,
    "The suite, third round"). The S3 bound stays for a run with ``store`` parametrized: 20 s, where a
    broker's liveness is an object rewritten every 2 s and each store request of a loaded test machine's
    local S3 server can take seconds (13 s was seen with three test workers on two cores)."""
    brokers = start_brokers(3)
    wait_for(cluster_of(brokers), 15, "a cluster of three")
    servers = bootstrap(brokers)
    with TopiclakeClient(bootstrap_servers=servers, timeout=10) as admin:
        admin.create_topic("orders", partitions=PARTITIONS, replication_factor=3)
    wait_for(cluster_of(brokers, "orders"), 15, "leaders for every partition")
    victim = brokers[1]
    moved = {p for p, leader in leaders(metadata(brokers[0]), "orders").items() if leader == victim.broker_id}
    assert moved, "the victim leads nothing"

    acked: dict[str, tuple[int, int]] = {}
    acked_at: list[tuple[float, int]] = []  # (time, partition) of each acknowledged record
    lock = threading.Lock()
    failures: list[BaseException] = []
    stop = threading.Event()

    def produce(thread: int) -> None:
        with TopiclakeClient(bootstrap_servers=servers, timeout=10, delivery_timeout=60) as tl:
            n = 0
            while not stop.is_set() and n < 20_000:
                batch = [{"key": f"t{thread}-{n + i}", "value": f"t{thread}-{n + i}"} for i in range(BATCH)]
                n += BATCH
                try:
                    results = tl.produce("orders", batch, encoding="string")["results"]
                except Exception as exc:
                    failures.append(exc)
                    return
                now = time.monotonic()
                with lock:
                    for rec, r in zip(batch, results, strict=True):
                        if r["error"] is None:
                            acked[str(rec["value"])] = (int(r["partition"] or 0), int(r["offset"] or 0))
                            acked_at.append((now, int(r["partition"] or 0)))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 200, 30, "200 records acknowledged before the kill")
        victim.kill9()
        killed = time.monotonic()
        wait_for(
            lambda: any(t > killed and p in moved for t, p in list(acked_at)),
            15,
            "an acknowledged record on a partition the dead broker led",
        )
        with lock:
            resumed = min(t for t, p in acked_at if t > killed and p in moved) - killed
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    assert not failures, failures
    limit = 10 if store == "local" else 20
    assert resumed < limit, f"producing to moved partitions resumed after {resumed:.1f} s"
    live = next(b for b in brokers if b.alive)
    assert not set(leaders(metadata(live), "orders").values()) & {victim.broker_id}

    dt = DeltaTable(victim.table_uri("orders"), storage_options=victim.options)
    table = dt.to_pyarrow_table(columns=["partition", "offset", "value"])
    rows = table.to_pylist()
    values = [bytes(r["value"]).decode() for r in rows]
    assert len(values) == len(set(values)), "a record was written twice"
    where = {bytes(r["value"]).decode(): (r["partition"], r["offset"]) for r in rows}
    missing = [v for v in acked if v not in where]
    assert not missing, f"{len(missing)} acknowledged records are not in the table"
    assert all(where[v] == pos for v, pos in acked.items()), "an acknowledged offset is not the record's"
    for p in range(PARTITIONS):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"


def test_controller_death_and_cluster_describe(
    start_brokers: Callable[..., list[BrokerProcess]],
) -> None:
    """On a directory: the controller's kill -9 on S3, with producers and a second death after it, is
    tests/platform/cluster/test_failover.py's; ``cluster describe`` does not depend on the store."""
    brokers = start_brokers(3)
    wait_for(cluster_of(brokers), 15, "a cluster of three")
    servers = bootstrap(brokers)
    with TopiclakeClient(bootstrap_servers=servers, timeout=10) as tl:
        tl.create_topic("ctl", partitions=3, replication_factor=3)
        wait_for(cluster_of(brokers, "ctl"), 15, "leaders for every partition")
        controller = tl.metadata()["controller_id"]
        next(b for b in brokers if b.broker_id == controller).kill9()
        wait_for(
            lambda: (
                tl.metadata()["controller_id"] not in (controller, -1) and len(tl.metadata()["brokers"]) == 2
            ),
            15,
            "a new controller",
        )
        wait_for(cluster_of(brokers, "ctl"), 15, "partitions moved off the dead controller")
        results = tl.produce("ctl", [{"value": i, "partition": i % 3} for i in range(9)])["results"]
        assert all(r["error"] is None for r in results)
        for p in range(3):
            assert len(tl.fetch("ctl", p, 0)["records"]) == 3
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "topiclake.cli",
            "cluster",
            "describe",
            "--json",
            "--bootstrap-server",
            servers,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["brokers"]) == 2
    assert sum(b["leader_count"] for b in doc["brokers"]) == 3
