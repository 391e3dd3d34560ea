"""Commit latency and records/s of the core's group commit against raw delta-rs appends of the same batches.

Run: ``.venv/bin/python bench/core_commit.py [--smoke] [--out DIR] [--seconds S]``

Every measurement runs on its own fresh table in one temporary warehouse, in this one process, so the
ratios to the raw reference of the same batch size are comparable even when the machine's speed drifts.
Writes ``DIR/latest.json`` (a list of results) and ``DIR/latest.md`` (a Markdown table) and prints the table.
See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import _common
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.schemas import PARTITION_COLUMNS, TOPIC_SCHEMA, TOPIC_TABLE_PROPERTIES

BATCH_SIZES = (1, 100, 1000, 10_000)
VALUE_BYTES = 100
THREADS = 32
RAW = "raw_delta_rs_append"


@dataclass
class Result:
    name: str
    batch_size: int
    calls: int
    records: int
    seconds: float
    records_per_s: float
    p50_ms: float
    p99_ms: float
    commits: int
    commit_p50_ms: float
    commit_p99_ms: float
    records_per_s_vs_raw: float | None = None
    p50_vs_raw: float | None = None


@dataclass(frozen=True)
class Limits:
    seconds: float
    max_calls: int


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank; 0 for no values."""
    return _common.percentile(values, q) or 0.0


def values(n: int, tag: str) -> list[bytes]:
    """``n`` distinct values of exactly VALUE_BYTES bytes."""
    return [f"{tag}-{i:012d}".encode().ljust(VALUE_BYTES, b".") for i in range(n)]


def timed_calls(call: Callable[[], None], limits: Limits) -> tuple[list[float], float]:
    """Call ``call`` until the time or call limit; return per-call latencies (ms) and elapsed seconds."""
    call()  # warm-up, not measured: creates the first file and opens handles
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + limits.seconds
    while len(latencies) < limits.max_calls and time.perf_counter() < deadline:
        t0 = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies, time.perf_counter() - start


def result(
    name: str, batch: int, latencies: list[float], seconds: float, commits: int, commit_ms: list[float]
) -> Result:
    records = batch * len(latencies)
    return Result(
        name=name,
        batch_size=batch,
        calls=len(latencies),
        records=records,
        seconds=round(seconds, 3),
        records_per_s=round(records / seconds, 1) if seconds > 0 else 0.0,
        p50_ms=round(percentile(latencies, 50), 3),
        p99_ms=round(percentile(latencies, 99), 3),
        commits=commits,
        commit_p50_ms=round(percentile(commit_ms, 50), 3),
        commit_p99_ms=round(percentile(commit_ms, 99), 3),
    )


def topic_table(batch: int) -> pa.Table:
    """A batch with the topic table's schema, as the core would commit it (one partition, one segment)."""
    now_us = time.time_ns() // 1000
    return pa.Table.from_arrays(
        [
            pa.nulls(batch, pa.binary()),
            pa.array(values(batch, "raw"), pa.binary()),
            pa.array(["raw"] * batch, pa.string()),
            pa.array([0] * batch, pa.int32()),
            pa.array(range(batch), pa.int64()),
            pa.array([now_us] * batch, pa.int64()).cast(TOPIC_SCHEMA.field("timestamp").type),
            pa.array([0] * batch, pa.int32()),
            pa.nulls(batch, TOPIC_SCHEMA.field("headers").type),
            pa.array([0] * batch, pa.int64()),
            pa.nulls(batch, pa.int64()),
            pa.nulls(batch, pa.int32()),
            pa.nulls(batch, pa.int32()),
        ],
        schema=TOPIC_SCHEMA,
    )


def bench_raw(root: Path, batch: int, limits: Limits) -> Result:
    uri = str(root / "raw" / f"b{batch}")
    DeltaTable.create(
        uri, TOPIC_SCHEMA, partition_by=list(PARTITION_COLUMNS), configuration=TOPIC_TABLE_PROPERTIES
    )
    handle = DeltaTable(uri)
    table = topic_table(batch)
    latencies, seconds = timed_calls(lambda: write_deltalake(handle, table, mode="append"), limits)
    return result(RAW, batch, latencies, seconds, len(latencies), latencies)


def bench_broker(broker: Broker, name: str, batch: int, limits: Limits, call: Callable[[], None]) -> Result:
    log = broker.log(name.replace("_", "-") + f"-b{batch}")
    commits0 = log.commits
    lat0 = len(log.commit_latencies_ms)
    latencies, seconds = timed_calls(call, limits)
    # the warm-up call's commit is in the counters too: leave it out
    commit_ms = log.commit_latencies_ms[lat0 + 1 :]
    return result(name, batch, latencies, seconds, log.commits - commits0 - 1, commit_ms)


def bench_produce_arrow(broker: Broker, batch: int, limits: Limits) -> Result:
    topic = f"produce-arrow-b{batch}"
    broker.create_topic(topic, partitions=1)
    table = pa.table({"value": pa.array(values(batch, "arrow"), pa.binary())})
    return bench_broker(
        broker, "produce_arrow", batch, limits, lambda: broker.produce_arrow(topic, 0, table, acks="all")
    )


def bench_produce_records(broker: Broker, batch: int, limits: Limits) -> Result:
    topic = f"produce-records-b{batch}"
    broker.create_topic(topic, partitions=1)
    records = [Record(value=v) for v in values(batch, "rec")]

    def call() -> None:
        results = broker.produce(topic, records, acks="all")
        if results[0].error is not None:
            raise results[0].error

    return bench_broker(broker, "produce_records", batch, limits, call)


def bench_threads(broker: Broker, limits: Limits) -> Result:
    """THREADS clients, each producing single records with acks=all: the group-commit case."""
    topic = f"produce-{THREADS}-threads-b1"
    broker.create_topic(topic, partitions=1)
    log = broker.log(topic)
    broker.produce(topic, [Record(value=b"warm-up")])
    commits0 = log.commits
    lat0 = len(log.commit_latencies_ms)
    per_thread: list[list[float]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS + 1)
    per_thread_calls = max(1, limits.max_calls)

    def client(i: int) -> None:
        value = values(1, f"t{i}")
        record = [Record(value=value[0])]
        barrier.wait()
        deadline = time.perf_counter() + limits.seconds
        out = per_thread[i]
        try:
            while len(out) < per_thread_calls and time.perf_counter() < deadline:
                t0 = time.perf_counter()
                (res,) = broker.produce(topic, record, acks="all")
                if res.error is not None:
                    raise res.error
                out.append((time.perf_counter() - t0) * 1000)
        except BaseException as exc:
            errors.append(exc)

    seconds = _common.run_threads(THREADS, client, barrier)
    if errors:
        raise errors[0]
    latencies = [x for lat in per_thread for x in lat]
    commit_ms = log.commit_latencies_ms[lat0:]
    return result(f"produce_{THREADS}_threads", 1, latencies, seconds, log.commits - commits0, commit_ms)


def add_ratios(results: list[Result]) -> None:
    raw = {r.batch_size: r for r in results if r.name == RAW}
    for r in results:
        ref = raw.get(r.batch_size)
        if ref is None:
            continue
        r.records_per_s_vs_raw = round(r.records_per_s / ref.records_per_s, 3) if ref.records_per_s else None
        r.p50_vs_raw = round(r.p50_ms / ref.p50_ms, 3) if ref.p50_ms else None


def machine(config: BrokerConfig) -> dict[str, str]:
    return _common.machine(broker=f"linger_ms={config.linger_ms:g}, fsync={config.fsync}")


def markdown(results: list[Result], info: dict[str, str]) -> str:
    def num(x: float | None, digits: int = 2) -> str:
        return "" if x is None else f"{x:,.{digits}f}"

    lines = [
        "# core commit benchmark",
        "",
        ", ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        f"Values of {VALUE_BYTES} B, acks=all, one fresh table per row. "
        "'x raw' is records/s divided by raw_delta_rs_append's of the same batch size.",
        "",
        "| name | batch | calls | records/s | x raw | p50 ms | p99 ms | commits | commit p50 ms "
        "| commit p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.batch_size:,} | {r.calls:,} | {num(r.records_per_s, 0)} | "
            f"{num(r.records_per_s_vs_raw)} | {num(r.p50_ms)} | {num(r.p99_ms)} | {r.commits:,} | "
            f"{num(r.commit_p50_ms)} | {num(r.commit_p99_ms)} |"
        )
    return "\n".join(lines) + "\n"


def run(limits: Limits, root: Path) -> list[Result]:
    results: list[Result] = []
    config = BrokerConfig()
    with Broker(Storage(str(root / "warehouse")), config) as broker:
        for batch in BATCH_SIZES:
            results.append(bench_raw(root, batch, limits))
            results.append(bench_produce_arrow(broker, batch, limits))
            results.append(bench_produce_records(broker, batch, limits))
        results.append(bench_threads(broker, limits))
    add_ratios(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a few seconds in all, tiny counts")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--seconds", type=float, default=3.0, help="time limit of one measurement")
    parser.add_argument("--max-calls", type=int, default=2000, help="call limit of one measurement")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    limits = Limits(0.2, 3) if args.smoke else Limits(args.seconds, args.max_calls)
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-") as tmp:
        results = run(limits, Path(tmp))
    info = machine(BrokerConfig())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    table = markdown(results, info)
    (out / "latest.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
