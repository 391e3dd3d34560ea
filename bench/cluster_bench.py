"""A cluster of brokers: aggregate produce throughput and p99 with 1, 2 and 3 brokers, and failover time.

Run: ``make bench-cluster`` or ``.venv/bin/python bench/cluster_bench.py [--smoke] [--out DIR] [--seconds S]
[--kills K]``

For each cluster size N (1, 2, 3), N ``topiclake serve --broker-id i`` processes start on 127.0.0.1 over a
fresh warehouse and a topic of 6 partitions (replication factor N) spreads its leaders across them. The load
comes from ``wrk`` (compiled, from Debian; ``make bench-cluster`` installs it): one wrk per broker that leads
partitions, POSTing acks=all produce requests only for the partitions that broker leads
(``?partition=P``, as a smart client routes them), one record or 1,000 records of 100 B per request; 32 or
8 connections in all, split over the brokers by the partitions they lead. Aggregate records/s is the sum
over the wrk processes; p50/p99 are the worst broker's (wrk reports percentiles per process).

Failover (N = 3): kill -9 the leader of a partition, then produce one record to that partition through the
live brokers (plain HTTP, no client retries) until one succeeds; the time from the kill to that success is
one sample. The killed broker is started again and rejoins before the next kill. p50 and max over K kills.

Writes ``DIR/cluster.json`` and ``DIR/cluster.md`` and prints the table. Speed is never asserted. On a 2-core
machine the brokers and the load generator share the cores: more brokers do not add CPU, so the numbers
show the cost of the cluster, not a scale-out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import orjson

import _common
import _wrk
from _common import GatewayProcess, percentile
from topiclake.client import TopiclakeClient

TOPIC = "bench"
PARTITIONS = 6
VALUE_BYTES = 100
WORKLOADS = ((1, 32), (1000, 8))  # (records per request, connections in all)
SIZES = (1, 2, 3)


@dataclass
class Result:
    name: str
    brokers: int
    batch_size: int = 0
    connections: int = 0
    brokers_loaded: int = 0
    cluster_formed: bool = False
    requests: int = 0
    records: int = 0
    seconds: float = 0.0
    records_per_s: float = 0.0
    requests_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    errors: int = 0
    samples_ms: list[float] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- cluster


class Cluster:
    """N brokers (ids 1..N) over one warehouse, each a ``topiclake serve`` subprocess."""

    def __init__(self, root: Path, size: int) -> None:
        self.root = root
        self.warehouse = root / f"wh-{size}"
        self.brokers: dict[int, GatewayProcess] = {}
        self.ports: dict[int, int] = {i: _common.free_port() for i in range(1, size + 1)}
        with ThreadPoolExecutor(size) as pool:  # start them side by side: each waits for /healthz
            list(pool.map(self.start, range(1, size + 1)))

    def start(self, broker_id: int) -> GatewayProcess:
        port = self.ports.get(broker_id) or _common.free_port()
        self.ports[broker_id] = port
        gw = GatewayProcess(
            self.warehouse,
            self.root / f"broker-{broker_id}.log",
            env={"TOPICLAKE_BROKER__LINGER_MS": "1"},
            args=("--broker-id", str(broker_id)),
            port=port,
        )
        self.brokers[broker_id] = gw
        return gw

    def live(self) -> list[GatewayProcess]:
        return [gw for gw in self.brokers.values() if gw.proc.poll() is None]

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{gw.port}" for gw in self.live())

    def metadata(self) -> dict[str, object]:
        with TopiclakeClient(bootstrap_servers=self.bootstrap(), timeout=10) as tl:
            return dict(tl.metadata())

    def leaders(self) -> dict[int, int]:
        meta = self.metadata()
        topics = meta["topics"]
        assert isinstance(topics, list)
        for t in topics:
            if t["name"] == TOPIC:
                return {int(p["partition"]): int(p["leader"]) for p in t["partitions"]}
        return {}

    def formed(self, size: int, wait: float) -> bool:
        """True once the metadata lists ``size`` brokers and a live leader for every partition."""
        deadline = time.monotonic() + wait
        while True:
            try:
                meta = self.metadata()
                brokers = meta["brokers"]
                assert isinstance(brokers, list)
                live = {int(b["id"]) for b in brokers}
                leaders = self.leaders()
                if len(live) == size and len(leaders) == PARTITIONS and set(leaders.values()) <= live:
                    return True
            except Exception:
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def stop(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.brokers))) as pool:
            list(pool.map(lambda gw: gw.stop(), self.brokers.values()))


def create_topic(cluster: Cluster, replication: int) -> None:
    """The bench topic with ``replication`` replicas, once that many brokers are live (a topic created
    before would get fewer replicas, and a dead broker's partitions would then have nowhere to go)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            brokers = cluster.metadata()["brokers"]
            if isinstance(brokers, list) and len(brokers) >= replication:
                break
        except Exception:
            pass
        time.sleep(0.2)
    with TopiclakeClient(bootstrap_servers=cluster.bootstrap(), timeout=30) as tl:
        try:
            tl.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=replication)
        except Exception:
            tl.create_topic(TOPIC, partitions=PARTITIONS)
        tl.produce(TOPIC, [{"value": "warm-up", "partition": p} for p in range(PARTITIONS)])


# ---------------------------------------------------------------------------------------------- wrk


def body(batch: int) -> str:
    value = "x" * VALUE_BYTES
    return orjson.dumps({"records": [{"value": value} for _ in range(batch)]}).decode()


def run_wrk(
    url: str, partitions: list[int], batch: int, connections: int, seconds: float, root: Path
) -> subprocess.Popen[str]:
    paths = [f"/v1/topics/{TOPIC}/records?partition={p}&acks=all" for p in partitions]
    name = f"produce-{batch}-{url.rsplit(':', 1)[1]}"
    headers = {"Content-Type": "application/json"}
    return _wrk.start(url, paths, body(batch).encode(), root, name, connections, seconds, headers=headers)


def split(connections: int, shares: dict[int, int]) -> dict[int, int]:
    """Connections per broker, proportional to the partitions each leads (at least 1 each)."""
    total = sum(shares.values())
    return {b: max(1, round(connections * n / total)) for b, n in shares.items()}


def bench_produce(
    cluster: Cluster, size: int, formed: bool, batch: int, connections: int, seconds: float, root: Path
) -> Result:
    leaders = cluster.leaders()
    by_broker: dict[int, list[int]] = {}
    for p, leader in sorted(leaders.items()):
        if leader in cluster.brokers:
            by_broker.setdefault(leader, []).append(p)
    conns = split(connections, {b: len(ps) for b, ps in by_broker.items()})
    procs = [
        run_wrk(cluster.brokers[b].url, ps, batch, conns[b], seconds, root) for b, ps in by_broker.items()
    ]
    outs = [_wrk.result(p) for p in procs]
    requests = sum(o.requests for o in outs)
    secs = max(o.seconds for o in outs)
    errors = sum(o.errors for o in outs)
    ok = max(0, requests - errors)
    return Result(
        name=f"produce_b{batch}",
        brokers=size,
        batch_size=batch,
        connections=sum(conns.values()),
        brokers_loaded=len(outs),
        cluster_formed=formed,
        requests=requests,
        records=ok * batch,
        seconds=round(secs, 3),
        records_per_s=round(ok * batch / secs, 1) if secs else 0.0,
        requests_per_s=round(requests / secs, 1) if secs else 0.0,
        p50_ms=max(o.p50_ms for o in outs),
        p99_ms=max(o.p99_ms for o in outs),
        max_ms=max(o.max_ms for o in outs),
        errors=errors,
    )


# ---------------------------------------------------------------------------------------------- failover


def failover(cluster: Cluster, kills: int, formed: bool, rejoin_wait: float) -> Result:
    samples: list[float] = []
    errors = 0
    for k in range(kills):
        p = k % PARTITIONS
        leader = cluster.leaders().get(p, 1)
        victim = cluster.brokers[leader]
        victim.kill9()
        killed = time.monotonic()
        others = [gw.url for gw in cluster.live()]
        done = False
        n = 0
        with httpx.Client(timeout=2) as http:
            while time.monotonic() - killed < 60 and others:
                url = others[n % len(others)]
                n += 1
                try:
                    r = http.post(
                        f"{url}/v1/topics/{TOPIC}/records",
                        params={"partition": p, "acks": "all"},
                        json={"records": [{"value": f"failover-{k}"}]},
                    )
                    if r.status_code == 200 and r.json()["results"][0]["error"] is None:
                        done = True
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
        if done:
            samples.append(round((time.monotonic() - killed) * 1000, 1))
        else:
            errors += 1
        cluster.start(leader)  # rejoins under its id; wait until the cluster is whole again
        if formed:
            cluster.formed(len(cluster.brokers), rejoin_wait)
    return Result(
        name="failover",
        brokers=len(cluster.brokers),
        cluster_formed=formed,
        requests=kills,
        p50_ms=percentile(samples, 50),
        p99_ms=None,
        max_ms=max(samples) if samples else None,
        errors=errors,
        samples_ms=samples,
    )


# ---------------------------------------------------------------------------------------------- report


def markdown(results: list[Result], facts: dict[str, str]) -> str:
    def num(v: float | None, digits: int = 1) -> str:
        return "-" if v is None else f"{v:,.{digits}f}"

    lines = [
        "| row | brokers | formed | batch | conns | loaded | requests | records/s | req/s | p50 ms | "
        "p99 ms | max ms | errors |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if r.name == "failover":
            continue
        lines.append(
            f"| {r.name} | {r.brokers} | {'yes' if r.cluster_formed else 'no'} | {r.batch_size:,} | "
            f"{r.connections} | {r.brokers_loaded} | {r.requests:,} | {num(r.records_per_s, 0)} | "
            f"{num(r.requests_per_s, 0)} | {num(r.p50_ms)} | {num(r.p99_ms)} | {num(r.max_ms)} | "
            f"{r.errors:,} |"
        )
    for r in results:
        if r.name == "failover":
            lines += [
                "",
                f"Failover with {r.brokers} brokers (kill -9 of a partition's leader → first acknowledged "
                f"produce to that partition through a live broker), {len(r.samples_ms)} of {r.requests} "
                f"kills: p50 {num(r.p50_ms)} ms, max {num(r.max_ms)} ms "
                f"(samples: {', '.join(f'{s:,.0f}' for s in r.samples_ms) or '-'}; not recovered in 60 s: "
                f"{r.errors}).",
            ]
    lines += [
        "",
        "`formed`: every broker's metadata listed the N brokers and a live leader per partition (no means "
        "the brokers did not form a cluster, e.g. without issue 12's server side: then only the brokers "
        "the metadata names as leaders get load, `loaded`). Percentiles are the worst broker's.",
        "",
        "Machine: " + ", ".join(f"{k}: {v}" for k, v in facts.items()) + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a few seconds per cluster size, one kill")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--seconds", type=float, default=10.0, help="wrk duration of one measurement")
    parser.add_argument("--kills", type=int, default=5, help="kill -9s for the failover time")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not _wrk.available():
        print("wrk is not installed: `make bench-cluster` installs it (apt-get install wrk)", file=sys.stderr)
        return 2
    seconds = 1.0 if args.smoke else args.seconds
    kills = 1 if args.smoke else args.kills
    started = time.perf_counter()

    def progress(what: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="topiclake-cluster-bench-") as tmp:
        root = Path(tmp)
        for size in SIZES:
            cluster = Cluster(root, size)
            try:
                create_topic(cluster, size)
                formed = cluster.formed(size, 3 if args.smoke else 20)
                progress(f"{size} broker(s) up (cluster formed: {formed})")
                for batch, connections in WORKLOADS:
                    results.append(bench_produce(cluster, size, formed, batch, connections, seconds, root))
                    progress(f"produce b{batch} with {size} broker(s)")
                if size == max(SIZES):
                    results.append(failover(cluster, kills, formed, 10 if args.smoke else 30))
                    progress(f"failover x{kills}")
            finally:
                cluster.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    facts = _common.machine(
        wrk=_wrk.version(), seconds=str(seconds), value_bytes=str(VALUE_BYTES), partitions=str(PARTITIONS)
    )
    facts["load"] = f"wrk -t1 per broker; shared {os.cpu_count()}-core machine, brokers and wrk on it"
    table = markdown(results, facts)
    (out / "cluster.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
