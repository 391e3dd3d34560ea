"""Sustained load (issue 8): continuous produce, a consumer group and a plain reader against one gateway.

Run: ``.venv/bin/python bench/sustained.py [--minutes M | --seconds S] [--window-seconds W] [--smoke]
[--out DIR]``

The gateway is ``topiclake serve`` in a subprocess (uvicorn on 127.0.0.1, one worker, default broker
settings, so maintenance is on) over a temporary warehouse. This process runs, on one topic of 4 partitions:
32 producer threads (single-record JSON requests, acks=all, each value carrying a unique id), one member of
a consumer group (native ``/v1`` groups API: join, heartbeat with poll, fetch, commit) and one plain reader
(Arrow fetches from offset 0 of every partition, tailing). Each window reports records/s, produce latency,
Delta commit latency of the topic, active files per partition, ``_delta_log`` files and the gateway's RSS.
At the end producers stop, both consumers catch up, a second reader reads everything again from offset 0,
and every acknowledged record is checked: read exactly once by the readers, at least once by the group,
and exactly once in the Delta table (read with delta-rs).

Writes ``DIR/sustained.json`` and ``DIR/sustained.md`` and prints the Markdown. Targets are printed, never
asserted. See bench/README.md for what each column means and how it is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from _common import GatewayProcess, percentile
from _sustained_load import (
    CONFIG,
    PARTITIONS,
    PRODUCERS,
    TOPIC,
    VALUE_CHARS,
    Clock,
    GroupState,
    ProducerState,
    ReaderState,
    group_member,
    idempotent_get,
    producer,
    reader,
)
from _sustained_measure import (
    LogState,
    S3Stack,
    TableSample,
    TopicTable,
    compactions_logged,
    gateway_warnings,
    histogram_quantile,
    log_watcher,
    longest_round_s,
    round_allowance,
    sample_table,
    scrape,
)
from _sustained_report import Window, machine, markdown, r3, verdicts, verify
from _sustained_wrk import WindowRun, WrkProducers


def end_offsets(http: httpx.Client) -> list[int]:
    resp = http.get(f"/v1/topics/{TOPIC}")
    resp.raise_for_status()
    ends = {o["partition"]: o["end_offset"] for o in resp.json()["offsets"]}
    return [int(ends[p]) for p in range(PARTITIONS)]


def wait_until(pred: Any, timeout_s: float) -> float | None:
    """Seconds until ``pred()`` held, or None after ``timeout_s``."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if pred():
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


def _diff(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {op: n - before.get(op, 0) for op, n in sorted(after.items()) if n - before.get(op, 0)}


def per_second(before: dict[str, int], after: dict[str, int], span: float) -> dict[str, float]:
    return {op: round(n / span, 1) for op, n in _diff(before, after).items()}


def run(args: argparse.Namespace, seconds: float, root: Path, progress: Any) -> dict[str, Any]:
    window_s = args.window_seconds
    windows = max(1, math.ceil(seconds / window_s - 1e-9))
    s3 = S3Stack() if args.store == "s3" else None
    try:
        return _run(args, seconds, root, progress, windows, s3)
    finally:
        if s3 is not None:
            s3.stop()


def gateway_launcher(args: argparse.Namespace) -> tuple[str, ...]:
    """How the gateway is started: ``topiclake serve`` itself, or with finer latency buckets (and the
    stall probes) through bench/_sustained_serve.py."""
    if args.coarse_buckets and not args.probe:
        return ("-m", "topiclake.cli")
    launcher: tuple[str, ...] = (str(Path(__file__).with_name("_sustained_serve.py")),)
    if args.probe:
        launcher += ("--probe", str(Path(args.out).resolve() / "sustained-probe.json"))
    return launcher


def _run(
    args: argparse.Namespace,
    seconds: float,
    root: Path,
    progress: Any,
    windows: int,
    s3: S3Stack | None,
) -> dict[str, Any]:
    window_s = args.window_seconds
    warehouse = s3.warehouse if s3 is not None else str(root / "warehouse")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    gateway = GatewayProcess(
        warehouse,  # type: ignore[arg-type]  # a local path or s3://
        root / "gateway.log",
        env=s3.gateway_env() if s3 is not None else None,
        args=("--log-level", args.gateway_log_level),
        launcher=gateway_launcher(args),
    )
    stop = threading.Event()
    abort = threading.Event()
    threads: list[threading.Thread] = []
    try:
        http = httpx.Client(base_url=gateway.url, timeout=60)
        http.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}).raise_for_status()
        # on S3 this process reads through a proxy of its own: the gateway's proxy counts only the gateway
        table = TopicTable(warehouse, s3.bench_options() if s3 is not None else None)
        clock = Clock(window_s, windows)
        go = threading.Event()
        targets: list[list[int] | None] = [None]
        wrk = WrkProducers(gateway.url, root / "wrk") if args.producers == "wrk" else None
        producers = wrk.states if wrk is not None else [ProducerState() for _ in range(PRODUCERS)]
        tail = ReaderState("reader")
        group = GroupState()
        logs = LogState()
        for i, st in enumerate(producers if wrk is None else []):
            threads.append(threading.Thread(target=producer, args=(gateway.url, i, clock, go, stop, st)))
        producer_threads = list(threads)
        threads.append(threading.Thread(target=reader, args=(gateway.url, tail, targets, abort, 5000)))
        threads.append(threading.Thread(target=group_member, args=(gateway.url, group, targets, abort, 2000)))
        watcher = threading.Thread(target=log_watcher, args=(table, clock, logs, abort))
        for t in threads:
            t.daemon = True
            t.start()
        watcher.daemon = True
        watcher.start()
        clock.start()
        go.set()
        progress(f"gateway pid {gateway.proc.pid} on {gateway.url}; producing for {seconds:g} s")
        before = scrape(http)
        requests_before = s3.requests() if s3 is not None else {}
        requests_start = requests_before
        sample_every = min(5.0, window_s / 4)
        results: list[Window] = []
        for w in range(windows):
            w_end = clock.t0 + min((w + 1) * window_s, seconds)
            if wrk is not None:
                wrk.start(w, w_end - time.perf_counter())
            samples: list[TableSample] = []
            while True:
                samples.append(sample_table(table, gateway))
                left = w_end - time.perf_counter()
                if left <= 0:
                    break
                time.sleep(min(sample_every, left))
            after = scrape(http)
            requests_after = s3.requests() if s3 is not None else {}
            if w == windows - 1:
                stop.set()
            wrk_run: WindowRun | None = wrk.finish() if wrk is not None else None
            time.sleep(0.3)  # let the requests of this window finish and their commits be read
            start_s, end_s = w * window_s, min((w + 1) * window_s, seconds)
            span = end_s - start_s
            lats = [x for s in producers for x in s.latencies.get(w, [])]
            acked = sum(s.acked.get(w, 0) for s in producers)
            commit_ms = logs.commit_ms.get(w, [])
            gateway_commits = int(after["commits"] - before["commits"])
            commits = logs.commits.get(w, 0)
            last = samples[-1]
            round_s = longest_round_s(before["round_buckets"], after["round_buckets"])
            allowance = round_allowance(commits / span if span else 0.0, round_s)
            highs = {
                o["partition"]: o["end_offset"]
                for o in idempotent_get(http, f"/v1/topics/{TOPIC}").json()["offsets"]
            }
            results.append(
                Window(
                    window=w + 1,
                    start_s=start_s,
                    end_s=end_s,
                    records=acked,
                    records_per_s=round(acked / span, 1),
                    produce_p50_ms=r3(wrk_run.p50_ms if wrk_run else percentile(lats, 50)),
                    produce_p99_ms=r3(wrk_run.p99_ms if wrk_run else percentile(lats, 99)),
                    gateway_produce_p50_ms=r3(histogram_quantile(0.5, before["buckets"], after["buckets"])),
                    gateway_produce_p99_ms=r3(histogram_quantile(0.99, before["buckets"], after["buckets"])),
                    produce_errors=sum(s.errors.get(w, 0) for s in producers),
                    throttled=sum(s.throttled.get(w, 0) for s in producers),
                    commits=commits,
                    commits_per_s=round(commits / span, 2),
                    records_per_commit=round(logs.commit_rows.get(w, 0) / commits, 2) if commits else None,
                    commit_p50_ms=r3(
                        histogram_quantile(0.5, before["commit_buckets"], after["commit_buckets"])
                    ),
                    commit_p99_ms=r3(
                        histogram_quantile(0.99, before["commit_buckets"], after["commit_buckets"])
                    ),
                    log_commit_p99_ms=percentile(commit_ms, 99),
                    gateway_commits=gateway_commits,
                    gateway_records_per_commit=round(
                        (after["committed_records"] - before["committed_records"]) / gateway_commits, 2
                    )
                    if gateway_commits
                    else None,
                    compactions=logs.compactions.get(w, 0),
                    active_files_max=max(max(s.files.values()) for s in samples),
                    active_files_end=[last.files.get(p, 0) for p in range(PARTITIONS)],
                    active_files_bound=min(last.bounds.values()),
                    within_bound=all(s.files[p] < s.bounds[p] + allowance for s in samples for p in s.files),
                    delta_log_files_max=max(s.log_files for s in samples),
                    delta_log_files_end=last.log_files,
                    rss_mb_max=r3(max((s.rss_mb or 0.0) for s in samples)),
                    rss_mb_end=r3(last.rss_mb),
                    reader_lag=sum(highs[p] - tail.positions_by_partition[p] for p in range(PARTITIONS)),
                    group_lag=sum(highs[p] - group.positions.get(p, 0) for p in range(PARTITIONS)),
                    store_requests_per_s=per_second(requests_before, requests_after, span) if s3 else None,
                    client_errors=wrk_run.errors if wrk_run else None,
                    maintenance_round_max_s=round_s,
                    round_allowance=allowance,
                )
            )
            before, requests_before = after, requests_after
            x = results[-1]
            progress(
                f"window {x.window}/{windows}: {x.records_per_s:,.0f} rec/s, produce p99 "
                f"{x.produce_p99_ms} ms, commit p99 {x.commit_p99_ms} ms, files max {x.active_files_max} "
                f"(bound {x.active_files_bound}), _delta_log {x.delta_log_files_max}, RSS {x.rss_mb_end} MiB"
            )
        produce_seconds = time.perf_counter() - clock.t0
        for t in producer_threads:
            t.join(60)
        targets[0] = end_offsets(http)
        progress(f"producers stopped; end offsets {targets[0]}")
        catchup_timeout = 30.0 if args.smoke else 180.0
        reader_s = wait_until(lambda: tail.done, catchup_timeout)
        group_s = wait_until(lambda: group.done, catchup_timeout)
        abort.set()
        for t in threads[len(producer_threads) :]:
            t.join(30)
        watcher.join(10)
        started = time.perf_counter()
        catchup = ReaderState("catchup_reader")
        again = threading.Event()
        reader_thread = threading.Thread(
            target=reader, args=(gateway.url, catchup, targets, again, 20_000), daemon=True
        )
        reader_thread.start()
        reader_thread.join(catchup_timeout)
        again.set()
        catchup_s = time.perf_counter() - started if catchup.done else None
        progress(f"consumers caught up (reader {reader_s} s, group {group_s} s, catch-up {catchup_s} s)")
        http.close()
    finally:
        stop.set()
        abort.set()
        if wrk is not None:
            wrk.stop()
        gateway.stop()
    check = verify(producers, [tail, catchup], group, table)
    warnings = gateway_warnings(gateway.log)
    shutil.copyfile(gateway.log, Path(args.out) / "sustained-gateway.log")
    compacted = compactions_logged(gateway.log, clock)
    for x in results:
        x.compaction_runs_logged, x.files_compacted_logged = compacted.get(x.window - 1, (0, 0))
    report: dict[str, Any] = {
        "machine": machine(args, seconds),
        "config": {
            "seconds": seconds,
            "window_seconds": window_s,
            "producers": PRODUCERS,
            "partitions": PARTITIONS,
            "value_bytes": VALUE_CHARS + 2,
            "compact_min_files": CONFIG.compact_min_files,
            "checkpoint_interval": CONFIG.checkpoint_interval,
            "log_retention_ms": CONFIG.log_retention_ms,
            "store": args.store,
            "producer_client": args.producers,
            "warehouse": warehouse,
            "gateway_buckets": "coarse" if args.coarse_buckets and not args.probe else "fine",
            "gateway_log_level": args.gateway_log_level,
        },
        "windows": [asdict(w) for w in results],
        "check": check,
        "end": {
            "produce_seconds": round(produce_seconds, 3),
            "end_offsets": targets[0],
            "reader_catchup_s": r3(reader_s),
            "group_catchup_s": r3(group_s),
            "catchup_reader_s": r3(catchup_s),
            "log_versions_missed": logs.missed,
            "gateway_warnings": sum(warnings.values()),
            "gateway_warning_kinds": dict(warnings.most_common(10)),
            "group": {
                "joins": group.joins,
                "heartbeats": group.heartbeats,
                "commits": group.commits,
                "commit_p50_ms": r3(percentile(group.commit_ms, 50)),
                "commit_p99_ms": r3(percentile(group.commit_ms, 99)),
                "errors": group.errors,
                "last_error": group.failure,
            },
            "reader_errors": {"reader": tail.errors, "catchup_reader": catchup.errors},
            "producer_last_error": next((s.failure for s in producers if s.failure), None),
            "log_watcher_error": logs.failure,
            "store_requests": _diff(requests_start, requests_before) if s3 is not None else None,
        },
    }
    report["verdicts"] = [asdict(v) for v in verdicts(results, check)]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to produce (default 10)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="how long to produce, overrides --minutes"
    )
    parser.add_argument("--window-seconds", type=float, default=60.0, help="report window (default 60)")
    parser.add_argument("--smoke", action="store_true", help="~20 s in all: 15 s of produce, 5 s windows")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--store",
        choices=("local", "s3"),
        default="local",
        help="warehouse on a local disk (default) or on S3: the local S3 API server behind its counting "
        "proxy, the gateway configured by AWS_* variables",
    )
    parser.add_argument(
        "--producers",
        choices=("python", "wrk"),
        default="python",
        help="the 32 single-record producers as Python threads (default) or as wrk (bench/_sustained_wrk.py: "
        "compiled, so the produce p99 is the gateway's, not the client's)",
    )
    parser.add_argument(
        "--coarse-buckets",
        action="store_true",
        help="the gateway's own latency buckets (default: finer ones, bench/_sustained_serve.py)",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="run the gateway under bench/_probe_serve.py (GC, loop lag); DIR/sustained-probe.json",
    )
    parser.add_argument(
        "--gateway-log-level",
        default="info",
        choices=("debug", "info", "warning"),
        help="the gateway's log level (default info: its compaction lines are counted per window)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        seconds = args.seconds or 15.0
        args.window_seconds = 5.0 if args.window_seconds == 60.0 else args.window_seconds
    else:
        seconds = args.seconds if args.seconds is not None else args.minutes * 60
    started = time.perf_counter()

    def progress(what: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:7.1f} s] {what}", file=sys.stderr, flush=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="topiclake-sustained-") as tmp:
        report = run(args, seconds, Path(tmp), progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sustained.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (out / "sustained.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
