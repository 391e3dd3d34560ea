"""Three real broker processes over one warehouse, killed with kill -9 while clients produce.

What Kafka promises a cluster, on shared storage: a dead broker's partitions move to live replicas, the
controller's death is survived, a returning broker takes its preferred partitions back, and through all of
it every acknowledged record is in the table exactly once with contiguous offsets. On a local directory and
on S3 (the ``warehouse`` fixture).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from cluster_procs import Cluster, Warehouse, until
from deltalake import DeltaTable

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 6


@dataclass(frozen=True)
class Ack:
    value: str
    partition: int
    offset: int
    at: float


class Producers:
    """Clients producing one record per request (acks=all) to explicit partitions, through the brokers
    listed in ``targets``. A failed attempt is retried with a new value, so each value is one attempt."""

    def __init__(self, n: int, targets: list[str]) -> None:
        self.targets = targets
        self.acks: list[Ack] = []
        self.failures = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]

    def __enter__(self) -> Producers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, client: int) -> None:
        seq = attempt = 0
        with httpx.Client(timeout=30) as http:
            while not self._stop.is_set():
                p = (seq + client) % PARTITIONS
                value = f"c{client}-{seq}-{attempt}"
                targets = list(self.targets)
                url = targets[(seq + attempt) % len(targets)]
                try:
                    r = http.post(
                        f"{url}/v1/topics/{TOPIC}/records",
                        params={"partition": p},
                        json={"records": [{"value": value}]},
                    )
                    res = r.json()["results"][0] if r.status_code == 200 else None
                    why = r.text[:300]
                except (httpx.HTTPError, ValueError) as exc:
                    res, why = None, repr(exc)
                if res is not None and res["error"] is None:
                    with self._lock:
                        self.acks.append(Ack(value, res["partition"], res["offset"], time.monotonic()))
                    seq, attempt = seq + 1, 0
                else:
                    with self._lock:
                        self.failures += 1
                        self.errors = [*self.errors[-20:], f"{time.monotonic():.1f} {url} p{p}: {why}"]
                    attempt += 1
                    time.sleep(0.05)

    def acked_since(self, t: float, partitions: set[int]) -> set[int]:
        with self._lock:
            return {a.partition for a in self.acks if a.at >= t and a.partition in partitions}

    def first_ack_after(self, t: float, partition: int) -> float:
        with self._lock:
            return min(a.at for a in self.acks if a.at >= t and a.partition == partition)


def check_table(warehouse: Warehouse, acks: list[Ack]) -> int:
    table = DeltaTable(warehouse.topic_uri(TOPIC), storage_options=warehouse.options)
    rows = table.to_pyarrow_table(columns=["partition", "offset", "value"])
    found: dict[str, list[tuple[int, int]]] = {}
    per_part: dict[int, list[int]] = {}
    for r in rows.to_pylist():
        found.setdefault(orjson.loads(r["value"]), []).append((r["partition"], r["offset"]))
        per_part.setdefault(r["partition"], []).append(r["offset"])
    dups = {v: where for v, where in found.items() if len(where) > 1}
    assert not dups, f"values written twice: {list(dups.items())[:5]}"
    for p, offsets in per_part.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
    for a in acks:
        assert found.get(a.value) == [(a.partition, a.offset)], f"acknowledged {a} not in the table as acked"
    return rows.num_rows


def test_kill9_of_brokers_and_the_controller_loses_and_duplicates_nothing(
    tmp_path: Path, warehouse: Warehouse
) -> None:
    cluster = Cluster(warehouse, tmp_path)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        until(lambda: len(cluster.metadata(3)["brokers"]) == 3, what="3 live brokers")
        r = httpx.post(f"{cluster.brokers[1].url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS})
        assert r.status_code == 201, r.text
        until(lambda: all(len(cluster.leaders(TOPIC, b)) == PARTITIONS for b in (1, 2, 3)), what="leaders")
        preferred = cluster.leaders(TOPIC, 1)
        controller = cluster.metadata(1)["controller_id"]
        victim = next(b for b in (1, 2, 3) if b != controller and b in preferred.values())
        others = [b for b in (1, 2, 3) if b != victim]
        victims_parts = {p for p, b in preferred.items() if b == victim}

        with Producers(4, [cluster.brokers[b].url for b in others]) as producers:
            time.sleep(2)
            # 1. kill -9 a broker that leads partitions, while 4 clients produce through the others
            killed_at = time.monotonic()
            cluster.kill9(victim)
            until(lambda: producers.acked_since(killed_at, victims_parts) == victims_parts, 30, "resume")
            resumed = max(producers.first_ack_after(killed_at, p) for p in victims_parts) - killed_at
            assert resumed < 10, f"producing to the dead broker's partitions resumed after {resumed:.1f} s"
            # every live broker's view moves off the victim (one may learn it a heartbeat after the clients
            # found the new leader through the other: seen once in a loaded full run)
            for b in others:
                until(
                    lambda b=b: all(cluster.leaders(TOPIC, b)[p] != victim for p in victims_parts),
                    10,
                    f"broker {b} sees the victim's partitions moved",
                )

            # 2. it comes back and takes its preferred partitions back, nothing lost or doubled
            cluster.start(victim)
            until(lambda: cluster.leaders(TOPIC, victim) == preferred, 30, "preferred leaders back")
            back_at = time.monotonic()
            # On S3 a delta-rs read through the loaded local server has been seen to take ~30 s under the
            # topic's lock and to stall the broker's heartbeat with it (docs/cluster.md, "Left to do"):
            # the wait for acks allows for one such stall there; what is acknowledged is checked below.
            window = 20 if warehouse.proxy is None else 60
            try:
                until(lambda: producers.acked_since(back_at, victims_parts) == victims_parts, window, "acks")
            except AssertionError:
                for bp in cluster.live():
                    os.kill(bp.proc.pid, signal.SIGUSR1)  # thread stacks into the logs
                time.sleep(1)
                raise AssertionError(f"no acks after return at {back_at:.1f}: {producers.errors}") from None

            # 3. kill -9 the controller: another broker takes over, and handles the next death too
            producers.targets[:] = [cluster.brokers[b].url for b in (1, 2, 3) if b != controller]
            cluster.kill9(controller)
            rest = [b for b in (1, 2, 3) if b != controller]
            until(lambda: cluster.metadata(rest[0])["controller_id"] in rest, 30, "new controller")
            new_controller = cluster.metadata(rest[0])["controller_id"]
            last = [b for b in rest if b != new_controller]
            producers.targets[:] = [cluster.brokers[new_controller].url]
            cluster.kill9(last[0])
            until(
                lambda: set(cluster.leaders(TOPIC, new_controller).values()) == {new_controller},
                30,
                "the last broker leads everything",
            )
            alone_at = time.monotonic()
            until(
                lambda: producers.acked_since(alone_at, set(range(PARTITIONS))) == set(range(PARTITIONS)), 30
            )
        assert len(producers.acks) > 100
        rows = check_table(warehouse, producers.acks)
        assert rows >= len(producers.acks)
    finally:
        cluster.stop_all()
