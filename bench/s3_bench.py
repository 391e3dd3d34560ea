"""Object storage vs local disk, in one run: commit latency, produce throughput, requests per commit.

The S3 side is the local S3 API server (``topiclake.objectstore.devserver``: moto, atomic per key)
behind the counting proxy (``ProxyProcess``), both on 127.0.0.1: its latencies are a loopback server's,
not AWS's (a real S3 PUT takes ~10-50 ms). What transfers to AWS are the request counts: requests per
commit by operation, and the maintenance thread's requests per minute at a steady produce rate (what
S3 bills per request).

Rows (each on local disk and on S3):
- ``raw_append``: ``write_deltalake`` of one 100 B record, reusing one handle (the physical reference).
- ``produce_1``: ``broker.produce`` of one record, acks=all, one caller at a time.
- ``produce_1000``: ``broker.produce`` of 1,000 records of 100 B, acks=all, one caller.
- ``produce_32_threads``: 32 threads producing one record each per call (group commit).
- ``steady_maintenance_on`` / ``_off`` (S3 only): ``--rate`` produce calls/s of 10 records for
  ``--steady-seconds``, with the maintenance thread on and off; requests per minute by operation. The
  difference is what checkpoints, log cleanup, compaction and vacuum cost.
- ``idle_maintenance_on`` (S3 only): a broker with one open topic and no produce: its background requests.

Usage: ``python bench/s3_bench.py [--smoke] [--out DIR]``; writes ``DIR/s3.json`` and ``DIR/s3.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from _common import machine, percentile
from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.platform import Broker, BrokerConfig, Record, Storage

VALUE = b"x" * 100


@dataclass
class Row:
    """One measured row."""

    name: str
    store: str
    calls: int
    records: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    commits: int
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def per_commit(self) -> dict[str, float]:
        return {op: n / self.commits for op, n in sorted(self.requests.items())} if self.commits else {}


def _counts(proxy: ProxyProcess | None) -> dict[str, int]:
    return {} if proxy is None else {k: v for k, v in proxy.counts().items() if k != "injected_errors"}


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {op: after.get(op, 0) - before.get(op, 0) for op in after if after.get(op, 0) - before.get(op, 0)}


def bench_raw(
    uri: str, options: dict[str, str] | None, store: str, calls: int, proxy: ProxyProcess | None
) -> Row:
    table = pa.table({"value": pa.array([VALUE], pa.binary())})
    write_deltalake(uri, table, storage_options=options)
    dt = DeltaTable(uri, storage_options=options)
    before = _counts(proxy)
    lat = []
    start = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        write_deltalake(dt, table, mode="append")
        lat.append((time.perf_counter() - t0) * 1000)
    seconds = time.perf_counter() - start
    return Row(
        "raw_append",
        store,
        calls,
        calls,
        seconds,
        percentile(lat, 50),
        percentile(lat, 99),
        calls,
        _diff(_counts(proxy), before),
    )


def bench_produce(
    broker: Broker, topic: str, batch: int, calls: int, store: str, proxy: ProxyProcess | None
) -> Row:
    broker.create_topic(topic, partitions=1)
    records = [Record(value=VALUE) for _ in range(batch)]
    broker.produce(topic, records)  # warm-up
    log = broker.log(topic)
    commits0 = log.commits
    before = _counts(proxy)
    lat = []
    start = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        results = broker.produce(topic, records, acks="all")
        if results[0].error is not None:
            raise results[0].error
        lat.append((time.perf_counter() - t0) * 1000)
    seconds = time.perf_counter() - start
    return Row(
        f"produce_{batch}",
        store,
        calls,
        calls * batch,
        seconds,
        percentile(lat, 50),
        percentile(lat, 99),
        log.commits - commits0,
        _diff(_counts(proxy), before),
    )


def bench_threads(broker: Broker, topic: str, per_thread: int, store: str, proxy: ProxyProcess | None) -> Row:
    broker.create_topic(topic, partitions=1)
    broker.produce(topic, [Record(value=VALUE)])
    log = broker.log(topic)
    commits0 = log.commits
    before = _counts(proxy)
    lat: list[float] = []
    lock = threading.Lock()

    def client(_: int) -> None:
        mine = []
        for _ in range(per_thread):
            t0 = time.perf_counter()
            broker.produce(topic, [Record(value=VALUE)], acks="all")
            mine.append((time.perf_counter() - t0) * 1000)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return Row(
        "produce_32_threads",
        store,
        len(lat),
        len(lat),
        seconds,
        percentile(lat, 50),
        percentile(lat, 99),
        log.commits - commits0,
        _diff(_counts(proxy), before),
    )


def bench_steady(
    storage: Storage, maintenance: bool, rate: float, seconds: float, proxy: ProxyProcess
) -> Row:
    config = BrokerConfig(linger_ms=2, maintenance=maintenance, maintenance_interval_ms=500)
    label = ("idle_" if rate <= 0 else "steady_") + ("maintenance_on" if maintenance else "maintenance_off")
    topic = label.replace("_", "-")
    with Broker(storage, config) as broker:
        broker.create_topic(topic, partitions=1)
        records = [Record(value=VALUE) for _ in range(10)]
        broker.produce(topic, records)
        log = broker.log(topic)
        commits0 = log.commits
        before = _counts(proxy)
        start = time.perf_counter()
        n = 0
        while (now := time.perf_counter()) - start < seconds:
            if rate <= 0:  # idle: only the broker's own background requests
                time.sleep(min(0.1, seconds - (now - start)))
                continue
            next_at = start + n / rate
            if now < next_at:
                time.sleep(next_at - now)
            broker.produce(topic, records, acks="all")
            n += 1
        elapsed = time.perf_counter() - start
        requests = _diff(_counts(proxy), before)
        commits = log.commits - commits0
        stats = log.maintainer.stats
    row = Row(label, "s3", n, n * 10, elapsed, None, None, commits, requests)
    print(f"  {row.name}: maintenance stats {stats}")
    return row


def markdown(rows: list[Row], steady: list[Row], info: dict[str, str]) -> str:
    lines = [
        "# Object storage vs local disk",
        "",
        ", ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        "| row | store | calls | records/s | p50 ms | p99 ms | commits | requests per commit (S3) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        per = ", ".join(f"{op} {n:.1f}" for op, n in r.per_commit().items()) if r.store == "s3" else ""
        lines.append(
            f"| {r.name} | {r.store} | {r.calls} | {r.records_per_s:,.0f} | {r.p50_ms or 0:.1f} | "
            f"{r.p99_ms or 0:.1f} | {r.commits} | {per} |"
        )
    if steady:
        lines += [
            "",
            "| steady produce (S3) | produce calls/s | commits | requests/min by op | total/min |",
            "|---|---:|---:|---|---:|",
        ]
        for r in steady:
            per_min = {op: n * 60 / r.seconds for op, n in sorted(r.requests.items())}
            ops = ", ".join(f"{op} {n:.0f}" for op, n in per_min.items())
            total = sum(per_min.values())
            lines.append(f"| {r.name} | {r.calls / r.seconds:.1f} | {r.commits} | {ops} | {total:.0f} |")
        on, off = steady[0], steady[1]
        extra = {
            op: (on.requests.get(op, 0) / on.seconds - off.requests.get(op, 0) / off.seconds) * 60
            for op in set(on.requests) | set(off.requests)
        }
        lines += [
            "",
            "Maintenance cost (on - off), requests/min: "
            + ", ".join(f"{op} {n:+.0f}" for op, n in sorted(extra.items())),
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few calls per row, a short steady phase")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0, help="produce calls/s in the steady phase")
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    args = parser.parse_args()
    calls = 3 if args.smoke else args.calls
    big_calls = 2 if args.smoke else max(5, args.calls // 5)
    per_thread = 2 if args.smoke else 10
    steady_s = 2.0 if args.smoke else args.steady_seconds
    rows: list[Row] = []
    steady: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, LocalS3Server() as server:
        server.create_bucket("bench")
        with ProxyProcess(server.endpoint) as proxy:
            options = {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": proxy.endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
            stores: list[tuple[str, Storage, ProxyProcess | None]] = [
                ("local", Storage(str(Path(tmp) / "wh")), None),
                ("s3", Storage("s3://bench/wh", options), proxy),
            ]
            for name, storage, px in stores:
                print(f"{name}: raw appends")
                rows.append(bench_raw(storage.uri("raw"), storage.options(), name, calls, px))
                with Broker(storage, BrokerConfig(linger_ms=2)) as broker:
                    print(f"{name}: produce")
                    rows.append(bench_produce(broker, "one", 1, calls, name, px))
                    rows.append(bench_produce(broker, "thousand", 1000, big_calls, name, px))
                    rows.append(bench_threads(broker, "threads", per_thread, name, px))
            print("s3: steady produce, maintenance on and off")
            s3_storage = stores[1][1]
            steady.append(bench_steady(s3_storage, True, args.rate, steady_s, proxy))
            steady.append(bench_steady(s3_storage, False, args.rate, steady_s, proxy))
            print("s3: idle broker, one topic, maintenance on")
            steady.append(bench_steady(s3_storage, True, 0, steady_s, proxy))
    info = machine(
        note="shared 2-core machine: S3 is moto on loopback (atomic per key), latencies are not AWS's",
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": info,
        "rows": [{**asdict(r), "records_per_s": r.records_per_s, "per_commit": r.per_commit()} for r in rows],
        "steady": [asdict(r) for r in steady],
    }
    (out / "s3.json").write_text(json.dumps(payload, indent=2) + "\n")
    table = markdown(rows, steady, info)
    (out / "s3.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
