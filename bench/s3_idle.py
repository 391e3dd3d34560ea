"""Issue 28 target 4: what an idle broker on S3 costs, per broker and per idle topic.

Two gateways (``topiclake serve``, default settings) side by side, each on its own bucket of the local S3
server behind its own counting proxy: one with ``--few`` topics, one with ``--many``. Each topic gets a few
records and one a consumer group; after ``--settle`` seconds (maintenance's rounds, the partitions' ends
recorded) the proxies count every request for ``--idle`` seconds, by operation and what it names. The
marginal cost of an idle topic is (many - few) / (many topics - few topics); the broker's base cost is the
few-topic count less that. Cluster membership (heartbeats) is counted apart: it is the broker's, not the
topics'.

Usage: ``python bench/s3_idle.py [--few 2] [--many 20] [--settle 75] [--idle 60] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import httpx

from _common import GatewayProcess, machine
from s3_wrk import _what
from topiclake.objectstore import LocalS3Server, ProxyProcess

CLUSTER = ("_system/brokers", "_system/partition_state", "_system/topics")


def _setup(url: str, topics: int) -> None:
    for i in range(topics):
        httpx.post(
            f"{url}/v1/topics", json={"name": f"idle-{i}", "partitions": 3}, timeout=60
        ).raise_for_status()
        records = [{"key": f"k{j}", "value": f"v{j}"} for j in range(10)]
        httpx.post(
            f"{url}/v1/topics/idle-{i}/records", json={"records": records}, timeout=60
        ).raise_for_status()
    offsets = [{"topic": "idle-0", "partition": p, "offset": 1} for p in range(3)]  # a group's commit
    httpx.post(f"{url}/v1/groups/g/offsets", json={"offsets": offsets}, timeout=60).raise_for_status()


def measure(server: LocalS3Server, bucket: str, topics: int, root: Path, settle: float, idle: float) -> dict:
    server.create_bucket(bucket)
    with ProxyProcess(server.endpoint) as proxy:
        env = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "TOPICLAKE_KAFKA_PORT": "0",
            "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0",
        }
        gw = GatewayProcess(f"s3://{bucket}/wh", root / f"gateway-{bucket}.log", env=env)  # type: ignore[arg-type]
        try:
            _setup(gw.url, topics)
            time.sleep(settle)
            proxy.record(True)
            time.sleep(idle)
            logged = proxy.requests()
            proxy.record(False)
        finally:
            gw.stop()
    cluster = Counter(f"{op} {_what(p)}" for _t, op, _m, p in logged if any(c in unquote(p) for c in CLUSTER))
    other = Counter(
        f"{op} {_what(p)}" for _t, op, _m, p in logged if not any(c in unquote(p) for c in CLUSTER)
    )
    paths = Counter(
        f"{op} {unquote(p).split('?')[0]}"
        for _t, op, _m, p in logged
        if not any(c in unquote(p) for c in CLUSTER)
    )
    return {
        "topics": topics,
        "idle_s": idle,
        "cluster": sum(cluster.values()),
        "other": sum(other.values()),
        "other_by_what": dict(other.most_common()),
        "other_by_path": dict(paths.most_common(30)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--few", type=int, default=2)
    parser.add_argument("--many", type=int, default=20)
    parser.add_argument("--settle", type=float, default=75.0, help="seconds after the setup before counting")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds counted")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    args = parser.parse_args()
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalS3Server() as server:

        def run(n: int) -> None:
            results[n] = measure(server, f"idle{n}", n, Path(tmp), args.settle, args.idle)

        threads = [threading.Thread(target=run, args=(n,)) for n in (args.few, args.many)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    few, many = results[args.few], results[args.many]
    per_topic = (many["other"] - few["other"]) / (args.many - args.few)
    base = few["other"] - per_topic * args.few
    scale = 10 / args.idle
    lines = [
        f"# An idle broker on S3: {args.idle:.0f} s counted after {args.settle:.0f} s to settle",
        "",
        ", ".join(f"{k}: {v}" for k, v in machine(note="local S3 server behind the counting proxy").items()),
        "",
        "| topics | requests (outside membership) | per 10 s | membership's requests | what |",
        "|---:|---:|---:|---:|---|",
    ]
    for r in (few, many):
        what = ", ".join(f"{k} {n}" for k, n in r["other_by_what"].items()) or "none"
        lines.append(f"| {r['topics']} | {r['other']} | {r['other'] * scale:.2f} | {r['cluster']} | {what} |")
    lines += [
        "",
        f"Marginal cost of an idle topic: **{per_topic * scale:.2f} requests per 10 s**; the broker's base "
        f"(outside membership): **{base * scale:.2f} per 10 s**; membership: "
        f"{few['cluster'] * scale:.1f} per 10 s.",
    ]
    table = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "s3_idle.json").write_text(json.dumps({"few": few, "many": many}, indent=2) + "\n")
    (out / "s3_idle.md").write_text(table)
    print(table)
    print(json.dumps({"few": few["other_by_path"], "many": many["other_by_path"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
