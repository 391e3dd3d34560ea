"""Issue 28's setup: one gateway on S3 with every store request delayed 20 ms, against local disk, with wrk.

The S3 side is the local S3 API server (``topiclake.objectstore.devserver``: moto, atomic per key)
behind the counting, fault-injecting proxy (``ProxyProcess``) with ``--delay-ms`` per request (20 ms:
about S3 Standard's small-object latency). Each store gets its own gateway (``topiclake serve``, one
uvicorn worker, maintenance on) and the same wrk loads, keyed JSON records of ~100 B, acks=all:

- ``1000 x 8``: 1,000 records per request, 8 connections;
- ``1 x 32``: one record per request, 32 connections;
- more with ``--loads`` (``1000x32``: 1,000 records per request, 32 connections, ~4x the data in flight);
- ``ProducerPerformance``: Kafka's own producer benchmark over the Kafka listener, acks=all, 100-byte
  records, with the client settings the object-storage Kafkas recommend (``batch.size=1048576
  linger.ms=50``), ``--kafka-records`` records (0: not run);
- ``idle``: after the loads and ``--settle`` seconds, the store requests of the idle broker (two topics).

S3 runs twice in one run: with the object-store append path (``broker.object_append``, the default) and
without it (delta-rs commits: the "before"). Per load: records/s, p50/p99 (wrk), commits (the gateway's
``/metrics``), store requests by operation (the proxy), per commit and per MB of records (key + value).

Usage: ``python bench/s3_wrk.py [--smoke] [--seconds S] [--out DIR]``; writes ``DIR/s3_wrk.json`` and
``DIR/s3_wrk.md``. Needs wrk (``make tools-wrk``).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import orjson

import _wrk
from _common import GatewayProcess, free_port, machine
from topiclake.objectstore import LocalS3Server, ProxyProcess

JSON = {"Content-Type": "application/json"}
VALUE = "x" * 92
#: The object-storage Kafkas' recommended producer settings (Bufstream, WarpStream), issue 28 target 3.
PP_PROPS = ["acks=all", "batch.size=1048576", "linger.ms=50"]
KEY_BYTES = 8  # "key-0001"


@dataclass
class Row:
    store: str
    load: str
    records_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    records: int
    commits: int
    requests: dict[str, int] = field(default_factory=dict)
    by_path: dict[str, int] = field(default_factory=dict)  # "OP what" (the proxy's log), S3 only
    commit_ms: float = 0.0  # a commit's mean time (the flusher's, data files to log entry), from /metrics

    @property
    def mb(self) -> float:
        return self.records * (KEY_BYTES + len(VALUE)) / 1e6

    def per_commit(self) -> dict[str, float]:
        return {op: n / self.commits for op, n in sorted(self.requests.items())} if self.commits else {}

    def per_mb(self) -> float:
        return sum(self.requests.values()) / self.mb if self.mb else 0.0


def body(n: int) -> bytes:
    return orjson.dumps({"records": [{"key": f"key-{i % 10_000:04d}", "value": VALUE} for i in range(n)]})


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(m) for m in re.findall(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M))


def _counts(proxy: ProxyProcess | None) -> dict[str, int]:
    if proxy is None:
        return {}
    return {k: v for k, v in proxy.counts().items() if k not in ("injected_errors", "cut_after_store")}


def run_store(
    store: str,
    warehouse: str,
    env: dict[str, str],
    proxy: ProxyProcess | None,
    root: Path,
    seconds: float,
    partitions: int,
    settle: float,
    idle: float,
    kafka_records: int = 0,
    loads: tuple[tuple[int, int], ...] = ((1000, 8), (1, 32)),
) -> list[Row]:
    rows: list[Row] = []
    env = {"TOPICLAKE_KAFKA_PORT": "0", "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0", **env}
    kafka_port = free_port() if kafka_records else 0
    gw = GatewayProcess(warehouse, root / f"gateway-{store}.log", env=env, kafka_port=kafka_port)  # type: ignore[arg-type]
    try:
        topics = {(per, conns): f"load-{per}x{conns}" for per, conns in loads}
        for topic in (*topics.values(), "pp"):
            httpx.post(
                f"{gw.url}/v1/topics", json={"name": topic, "partitions": partitions}, timeout=60
            ).raise_for_status()
            httpx.post(f"{gw.url}/v1/topics/{topic}/records", content=body(10), headers=JSON, timeout=60)
        for (per, conns), topic in topics.items():
            load = f"{per} x {conns}"
            commits0 = _metric(gw.url, "topiclake_topic_commits")
            spent0 = _metric(gw.url, "topiclake_topic_commit_latency_seconds_sum")
            before = _counts(proxy)
            if proxy is not None:
                proxy.record(True)
            print(f"{store}: {load}", flush=True)
            path = [f"/v1/topics/{topic}/records"]
            r = _wrk.run(gw.url, path, body(per), root, f"{store}{per}", conns, seconds, "POST", JSON)
            if r.errors:
                tail = gw.log.read_text()[-1500:]
                print(f"  {r.errors} errors; the gateway's log ends:\n{tail}", flush=True)
            after = _counts(proxy)
            by_path = _by_path(proxy)
            commits = int(_metric(gw.url, "topiclake_topic_commits") - commits0)
            spent = _metric(gw.url, "topiclake_topic_commit_latency_seconds_sum") - spent0
            requests = {op: after.get(op, 0) - before.get(op, 0) for op in after}
            rows.append(
                Row(
                    store,
                    load,
                    round(r.requests_per_s * per, 1),
                    r.p50_ms,
                    r.p99_ms,
                    r.errors,
                    r.ok * per,
                    commits,
                    {k: v for k, v in requests.items() if v},
                    by_path,
                    round(spent * 1000 / commits, 1) if commits else 0.0,
                )
            )
            print(f"  {rows[-1]}", flush=True)
        if kafka_records:
            rows.append(_producer_performance(store, gw.url, kafka_port, proxy, kafka_records))
            print(f"  {rows[-1]}", flush=True)
        if proxy is not None and idle > 0:
            time.sleep(settle)
            before = _counts(proxy)
            time.sleep(idle)
            after = _counts(proxy)
            requests = {op: after.get(op, 0) - before.get(op, 0) for op in after}
            rows.append(
                Row(store, f"idle {idle:.0f} s", 0, 0, 0, 0, 0, 0, {k: v for k, v in requests.items() if v})
            )
            print(f"  {rows[-1]}", flush=True)
    finally:
        gw.stop()
    return rows


def _what(path: str) -> str:
    """What a request's path names, without names and versions: ``log entry``, ``data file``, ..."""
    url = urlparse(path)
    key = parse_qs(url.query).get("prefix", [url.path])[0]
    table = "_system" if "/_system/" in f"/{key}" else "topic"
    if "_last_checkpoint" in key:
        what = "_last_checkpoint"
    elif "checkpoint.parquet" in key:
        what = "checkpoint"
    elif "/_delta_log/" in key and key.endswith(".json"):
        what = "log entry"
    elif "/_delta_log" in key:
        what = "log"
    elif key.endswith(".parquet"):
        what = "data file"
    elif "/_system/brokers" in f"/{key}" or "/_leases" in key or "leases" in key:
        what = "leases/brokers"
    else:
        what = "other"
    return f"{table} {what}"


def _by_path(proxy: ProxyProcess | None) -> dict[str, int]:
    """The requests the proxy logged since :meth:`ProxyProcess.record`, by operation and what they
    named; the log is then dropped."""
    if proxy is None:
        return {}
    logged = Counter(f"{op} {_what(path)}" for _t, op, _m, path in proxy.requests())
    proxy.record(False)
    return dict(logged.most_common())


def _producer_performance(
    store: str, url: str, kafka_port: int, proxy: ProxyProcess | None, records: int
) -> Row:
    from kafka_bench import producer_performance  # resolves Kafka's tools jars from Maven on first use

    commits0 = _metric(url, "topiclake_topic_commits")
    before = _counts(proxy)
    print(f"{store}: ProducerPerformance", flush=True)
    r = producer_performance(f"127.0.0.1:{kafka_port}", "pp", records, PP_PROPS)
    after = _counts(proxy)
    commits = int(_metric(url, "topiclake_topic_commits") - commits0)
    requests = {op: after.get(op, 0) - before.get(op, 0) for op in after}
    sent = int(r["records"])
    # ProducerPerformance reports the average and p99 (no p50): the average stands in the p50 column
    return Row(
        store,
        "ProducerPerformance",
        r["rec_per_s"],
        r["avg_ms"],
        r["p99_ms"],
        0,
        sent,
        commits,
        {k: v for k, v in requests.items() if v},
    )


def markdown(rows: list[Row], info: dict[str, str], delay_ms: float) -> str:
    local = {r.load: r.records_per_s for r in rows if r.store == "local"}
    lines = [
        f"# S3 (+{delay_ms:.0f} ms per request) vs local disk, wrk, acks=all",
        "",
        ", ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        "| store | load | records/s | x local | p50 ms | p99 ms | errors | commits | records/commit | "
        "commit ms | requests per commit | requests per MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        if r.load.startswith("idle"):
            total = sum(r.requests.values())
            secs = float(r.load.split()[1])
            ops = ", ".join(f"{op} {n}" for op, n in sorted(r.requests.items())) or "none"
            blank = "| " * 8
            lines.append(f"| {r.store} | {r.load} {blank}| {ops} | {total * 10 / secs:.1f} per 10 s |")
            continue
        ratio = r.records_per_s / local[r.load] if local.get(r.load) else 0.0
        per = ", ".join(f"{op} {n:.2f}" for op, n in r.per_commit().items())
        per_mb = f"{r.per_mb():.1f}" if r.requests else ""
        rpc = r.records / r.commits if r.commits else 0
        lines.append(
            f"| {r.store} | {r.load} | {r.records_per_s:,.0f} | {ratio:.2f} | {r.p50_ms:.0f} | "
            f"{r.p99_ms:.0f} | {r.errors} | {r.commits} | {rpc:,.0f} | {r.commit_ms:.0f} | {per} | {per_mb} |"
        )
    traced = [r for r in rows if r.by_path and r.commits]
    if traced:
        lines += ["", "Requests per commit by what they named (the proxy's log), S3:", ""]
        lines += ["| store | load | requests per commit |", "|---|---|---|"]
        for r in traced:
            top = ", ".join(f"{k} {n / r.commits:.2f}" for k, n in r.by_path.items() if n / r.commits >= 0.01)
            lines.append(f"| {r.store} | {r.load} | {top} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="3 s per load, short idle")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after the loads before idle")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle measured")
    parser.add_argument(
        "--stores",
        default="local,s3,s3-delta-rs",
        help="of local, s3, s3-delta-rs, s3-nocompact, s3-nopipe (repeat to alternate); "
        "s3+KEY=VALUE: with a broker setting",
    )
    parser.add_argument(
        "--kafka-records",
        type=int,
        default=1_000_000,
        help="records of the ProducerPerformance load (0: none; smoke: 20,000)",
    )
    parser.add_argument(
        "--loads", default="1000x8,1x32", help="records per request x connections, each a topic of its own"
    )
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    args = parser.parse_args()
    kafka_records = min(args.kafka_records, 20_000) if args.smoke else args.kafka_records
    seconds = 3.0 if args.smoke else args.seconds
    settle, idle = (2.0, 5.0) if args.smoke else (args.settle, args.idle)
    if not _wrk.available():
        raise SystemExit("wrk is not installed: make tools-wrk")
    loads = tuple((int(a), int(b)) for a, b in (x.split("x") for x in args.loads.split(",")))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, LocalS3Server() as server:
        root = Path(tmp)
        with ProxyProcess(server.endpoint) as proxy:
            proxy.delay(args.delay_ms / 1000)
            aws = {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": proxy.endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
            for n, store in enumerate(args.stores.split(",")):
                if store == "local":
                    rows += run_store(
                        store,
                        str(root / "wh"),
                        {},
                        None,
                        root,
                        seconds,
                        args.partitions,
                        0,
                        0,
                        kafka_records,
                        loads,
                    )
                    continue
                bucket = f"bench{n}"
                server.create_bucket(bucket)
                env = {**aws}
                if store.split("+")[0] == "s3-delta-rs":
                    env["TOPICLAKE_BROKER__OBJECT_APPEND"] = "false"
                for setting in store.split("+")[1:]:  # "s3+TAIL_CACHE_BYTES=33554432": a broker setting
                    key, _, value = setting.partition("=")
                    env[f"TOPICLAKE_BROKER__{key.upper()}"] = value
                if (
                    store.split("+")[0] == "s3-nopipe"
                ):  # no flush split into two overlapping commits (the build before)
                    env["TOPICLAKE_BROKER__OBJECT_PIPELINE_MAX_BYTES"] = "0"
                if (
                    store.split("+")[0] == "s3-nocompact"
                ):  # the commit path without compaction's GETs beside it
                    env["TOPICLAKE_BROKER__COMPACT_MIN_FILES"] = "1000000"
                rows += run_store(
                    store,
                    f"s3://{bucket}/wh",
                    env,
                    proxy,
                    root,
                    seconds,
                    args.partitions,
                    settle,
                    idle,
                    kafka_records,
                    loads,
                )
    info = machine(
        note=f"shared 2-core machine; S3: moto on loopback (atomic per key) behind a proxy adding "
        f"{args.delay_ms:.0f} ms per request; {args.partitions} partitions; wrk {_wrk.version()}",
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": info,
        "rows": [{**asdict(r), "per_commit": r.per_commit(), "per_mb": r.per_mb(), "mb": r.mb} for r in rows],
    }
    (out / "s3_wrk.json").write_text(json.dumps(payload, indent=2) + "\n")
    table = markdown(rows, info, args.delay_ms)
    (out / "s3_wrk.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
