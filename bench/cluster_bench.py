"""A cluster of brokers: aggregate produce throughput and p99 with 1, 2 and 3 brokers, and failover time.

Run: ``make bench-cluster`` or ``.venv/bin/python bench/cluster_bench.py [--smoke] [--out DIR] [--seconds S]
[--kills K] [--store local|s3] [--delay-ms MS] [--only produce|failover|idle]``

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

Each failover sample also records when a live broker's metadata first named another leader for the
partition ("led elsewhere"), polled every 50 ms beside the produce attempts.

``--store s3``: the warehouse is a bucket of the project's local S3 API server, each broker reaching it
through a counting proxy of its own (``topiclake.objectstore.ProxyProcess``) that delays every request by
``--delay-ms`` (default 20: the store 20 ms away). Idle cost (``--only idle`` or part of the default run on
S3): 3 brokers and 2 topics of 6 partitions, each written once; after 15 s of quiet the requests each
broker's proxy forwards in ``--idle-seconds`` (default 60) are counted per operation: membership, the
controller, and maintenance of the idle topics together, as a user's bill would show them.

Writes ``DIR/cluster[-s3].json`` and ``DIR/cluster[-s3].md`` and prints the table. Speed is never
asserted. On a 2-core machine the brokers and the load generator share the cores: more brokers do not add
CPU, so the numbers show the cost of the cluster, not a scale-out.
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
from topiclake.objectstore import LocalS3Server, ProxyProcess

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
    led_elsewhere_ms: list[float] = field(default_factory=list)
    store_requests_per_s: dict[str, float] = field(default_factory=dict)  # idle: per broker and op


class Store:
    """Where the cluster's warehouse lives: a local directory, or a bucket of the local S3 API server with
    a counting, delaying proxy per broker."""

    def __init__(self, kind: str, delay_s: float) -> None:
        self.kind = kind
        self.delay_s = delay_s
        self.server: LocalS3Server | None = None
        self.proxies: dict[int, ProxyProcess] = {}
        self._buckets = 0
        if kind == "s3":
            self.server = LocalS3Server().start()

    def warehouse(self, root: Path, name: str) -> str:
        if self.server is None:
            return str(root / name)
        self._buckets += 1
        bucket = f"{name}-{self._buckets}"
        self.server.create_bucket(bucket)
        return f"s3://{bucket}/wh"

    def env(self, broker_id: int) -> dict[str, str]:
        if self.server is None:
            return {}
        proxy = self.proxies.get(broker_id)
        if proxy is None:
            proxy = self.proxies[broker_id] = ProxyProcess(self.server.endpoint).start()
            proxy.delay(self.delay_s)
        return {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def counts(self) -> dict[int, dict[str, int]]:
        return {b: {k: v for k, v in p.counts().items() if v} for b, p in self.proxies.items()}

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()
        if self.server is not None:
            self.server.stop()


# ---------------------------------------------------------------------------------------------- cluster


class Cluster:
    """N brokers (ids 1..N) over one warehouse, each a ``topiclake serve`` subprocess."""

    def __init__(self, root: Path, size: int, store: Store) -> None:
        self.root = root
        self.store = store
        self.warehouse = store.warehouse(root, f"wh-{size}")
        self.brokers: dict[int, GatewayProcess] = {}
        self.ports: dict[int, int] = {i: _common.free_port() for i in range(1, size + 1)}
        with ThreadPoolExecutor(size) as pool:  # start them side by side: each waits for /healthz
            list(pool.map(self.start, range(1, size + 1)))

    def start(self, broker_id: int) -> GatewayProcess:
        port = self.ports.get(broker_id) or _common.free_port()
        self.ports[broker_id] = port
        gw = GatewayProcess(
            self.warehouse,  # type: ignore[arg-type]  # a local path or s3://
            self.root / f"broker-{broker_id}.log",
            env={"TOPICLAKE_BROKER__LINGER_MS": "1", **self.store.env(broker_id)},
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


def create_topic(cluster: Cluster, replication: int, name: str = TOPIC) -> None:
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
            tl.create_topic(name, partitions=PARTITIONS, replication_factor=replication)
        except Exception:
            tl.create_topic(name, partitions=PARTITIONS)
        tl.produce(name, [{"value": "warm-up", "partition": p} for p in range(PARTITIONS)])


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
    led: list[float] = []
    errors = 0
    for k in range(kills):
        p = k % PARTITIONS
        leader = cluster.leaders().get(p, 1)
        victim = cluster.brokers[leader]
        victim.kill9()
        killed = time.monotonic()
        others = [gw.url for gw in cluster.live()]
        watcher = ThreadPoolExecutor(1)
        moved = watcher.submit(led_elsewhere, others[0], p, leader, killed)
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
        moved_ms = moved.result()
        watcher.shutdown()
        if moved_ms is not None:
            led.append(moved_ms)
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
        led_elsewhere_ms=led,
    )


def led_elsewhere(url: str, partition: int, old: int, since: float) -> float | None:
    """Milliseconds from ``since`` until ``url``'s metadata names a leader other than ``old`` (60 s max)."""
    with httpx.Client(timeout=2) as http:
        while time.monotonic() - since < 60:
            try:
                for t in http.get(f"{url}/v1/metadata").json()["topics"]:
                    if t["name"] == TOPIC:
                        leader = {q["partition"]: q["leader"] for q in t["partitions"]}.get(partition)
                        if leader is not None and leader != old:
                            return round((time.monotonic() - since) * 1000, 1)
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.05)
    return None


# ---------------------------------------------------------------------------------------------- idle


def idle_cost(root: Path, store: Store, settle_s: float, seconds: float) -> Result:
    """Store requests per second per broker of 3 idle brokers with 2 idle topics (S3 only)."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, 3, store)
    try:
        create_topic(cluster, 3)
        create_topic(cluster, 3, f"{TOPIC}-2")
        formed = cluster.formed(3, 30)
        time.sleep(settle_s)
        before = store.counts()
        time.sleep(seconds)
        after = store.counts()
        controller = cluster.metadata().get("controller_id")
    finally:
        cluster.stop()
    per_op: dict[str, float] = {}
    for b in after:
        for op, n in after[b].items():
            key = f"broker {b}{' (controller)' if b == controller else ''}: {op}"
            per_op[key] = round((n - before.get(b, {}).get(op, 0)) / seconds, 3)
    return Result(name="idle", brokers=3, cluster_formed=formed, seconds=seconds, store_requests_per_s=per_op)


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
        if r.name in ("failover", "idle"):
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
                f"{r.errors}). Led elsewhere (a live broker's metadata names another leader): p50 "
                f"{num(percentile(r.led_elsewhere_ms, 50))} ms, max "
                f"{num(max(r.led_elsewhere_ms) if r.led_elsewhere_ms else None)} ms "
                f"(samples: {', '.join(f'{s:,.0f}' for s in r.led_elsewhere_ms) or '-'}).",
            ]
        if r.name == "idle":
            per_broker: dict[str, float] = {}
            for key, rate in r.store_requests_per_s.items():
                broker = key.split(":")[0]
                per_broker[broker] = per_broker.get(broker, 0.0) + rate
            lines += [
                "",
                f"Idle, 3 brokers, 2 idle topics, {r.seconds:.0f} s (store requests/s per broker, by "
                "operation, membership + controller + maintenance):",
                "",
                "| broker | op | requests/s |",
                "| --- | --- | ---: |",
                *(
                    f"| {k.split(': ')[0]} | {k.split(': ')[1]} | {v:.3f} |"
                    for k, v in sorted(r.store_requests_per_s.items())
                ),
                *(f"| {b} | **all** | **{v:.3f}** |" for b, v in sorted(per_broker.items())),
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
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds per cluster size (1 and 3 brokers), one kill"
    )
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--seconds", type=float, default=10.0, help="wrk duration of one measurement")
    parser.add_argument("--kills", type=int, default=5, help="kill -9s for the failover time")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--store", choices=("local", "s3"), default="local", help="where the warehouse is")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="S3: delay of every store request")
    parser.add_argument("--only", choices=("all", "produce", "failover", "idle"), default="all")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="S3: idle requests counted so long")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.only in ("all", "produce") and not _wrk.available():
        print("wrk is not installed: `make bench-cluster` installs it (apt-get install wrk)", file=sys.stderr)
        return 2
    seconds = 1.0 if args.smoke else args.seconds
    kills = 1 if args.smoke else args.kills
    started = time.perf_counter()

    def progress(what: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    results: list[Result] = []
    store = Store(args.store, args.delay_ms / 1000 if args.store == "s3" else 0.0)
    produce = args.only in ("all", "produce")
    sizes = SIZES if produce else (max(SIZES),)
    if args.smoke:  # one broker and the largest cluster: a middle size runs the same code (Cluster(size))
        sizes = (min(SIZES), max(SIZES)) if produce else sizes
    try:
        with tempfile.TemporaryDirectory(prefix="topiclake-cluster-bench-") as tmp:
            root = Path(tmp)
            if args.store == "s3" and args.only in ("all", "idle"):
                idle_s = 10.0 if args.smoke else args.idle_seconds
                results.append(idle_cost(root / "idle", store, 5 if args.smoke else 15, idle_s))
                progress("idle cost")
            for size in sizes if args.only != "idle" else ():
                cluster = Cluster(root, size, store)
                try:
                    create_topic(cluster, size)
                    formed = cluster.formed(size, 3 if args.smoke else 20)
                    progress(f"{size} broker(s) up (cluster formed: {formed})")
                    for batch, connections in WORKLOADS if produce else ():
                        row = bench_produce(cluster, size, formed, batch, connections, seconds, root)
                        results.append(row)
                        progress(f"produce b{batch} with {size} broker(s)")
                    if size == max(SIZES) and args.only in ("all", "failover"):
                        results.append(failover(cluster, kills, formed, 10 if args.smoke else 30))
                        progress(f"failover x{kills}")
                finally:
                    cluster.stop()
    finally:
        store.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "cluster" if args.store == "local" else "cluster-s3"
    (out / f"{stem}.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    facts = _common.machine(
        wrk=_wrk.version() if produce else "-",
        seconds=str(seconds),
        value_bytes=str(VALUE_BYTES),
        partitions=str(PARTITIONS),
        store=args.store + (f" ({args.delay_ms:g} ms per request)" if args.store == "s3" else ""),
    )
    facts["load"] = f"wrk -t1 per broker; shared {os.cpu_count()}-core machine, brokers and wrk on it"
    table = markdown(results, facts)
    (out / f"{stem}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
