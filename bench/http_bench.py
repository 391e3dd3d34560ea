"""Produce and fetch over HTTP against a real gateway, with raw delta-rs appends of the same batches.

Run: ``.venv/bin/python bench/http_bench.py [--smoke] [--out DIR] [--seconds S] [--max-calls N]``

The gateway is ``topiclake serve`` in a subprocess (uvicorn on 127.0.0.1, one worker) over a temporary
warehouse; the load comes from this process (threads, one ``httpx.Client`` each), so on a 2-core machine
the load generator and the gateway share the cores. Historic fetches run after a restart of the gateway
with ``TOPICLAKE_BROKER__TAIL_CACHE_BYTES=0``, so nothing is served from memory.

Writes ``DIR/http.json`` (a list of results) and ``DIR/http.md`` (a Markdown table with DESIGN §9's targets)
and prints the table. Speed is never asserted. See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import orjson
import pyarrow as pa

import _common
import core_commit
from _common import GatewayProcess
from topiclake.client import TopiclakeClient

percentile = core_commit.percentile

BATCH_SIZES = (1, 100, 1000)
BODIES = ("json", "binary", "ndjson", "arrow")
ACKS = ("all", "1", "0")
CLIENTS = (1, 32)
VALUE_BYTES = 100
RAW = "raw_delta_rs_append"
JSON = "application/json"
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"


@dataclass
class Result:
    name: str
    body: str
    acks: str
    clients: int
    batch_size: int
    calls: int
    records: int
    seconds: float
    records_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int = 0
    throttled: int = 0
    first_ms: float | None = None
    records_per_s_vs_raw: float | None = None
    p50_vs_raw: float | None = None
    target: str = ""
    meets_target: bool | None = None


@dataclass(frozen=True)
class Limits:
    seconds: float
    max_calls: int


@dataclass(frozen=True)
class Sizes:
    """Amounts of data of one run (smaller in smoke mode)."""

    fetch_records: int
    small_files: int


# ---------------------------------------------------------------------------------------------- gateway


# ---------------------------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Request:
    """One prepared HTTP request; ``count`` turns its answer into (records ok, records failed)."""

    method: str
    path: str
    params: dict[str, str | int]
    headers: dict[str, str]
    content: bytes | None
    count: Callable[[httpx.Response], tuple[int, int]]


def send(http: httpx.Client, req: Request) -> tuple[int, int, int]:
    """Send a request, retrying while the gateway throttles (429/503); (ok, failed, throttled)."""
    throttled = 0
    while True:
        resp = http.request(req.method, req.path, params=req.params, headers=req.headers, content=req.content)
        if resp.status_code in (429, 503) and throttled < 1000:
            throttled += 1
            time.sleep(0.01)
            continue
        if resp.status_code >= 400:
            raise RuntimeError(f"{req.method} {req.path}: HTTP {resp.status_code}: {resp.text[:300]}")
        ok, failed = req.count(resp)
        return ok, failed, throttled


@dataclass
class Load:
    latencies: list[float]
    seconds: float
    records: int
    errors: int
    throttled: int
    first_ms: float


def run_load(url: str, clients: int, limits: Limits, request_for: Callable[[int, int], Request]) -> Load:
    """``clients`` threads, each with its own connection, sending ``request_for(client, call)`` until the
    time or call limit. The first call of each client is a warm-up and is not counted."""
    per_thread: list[list[float]] = [[] for _ in range(clients)]
    totals = [[0, 0, 0] for _ in range(clients)]
    firsts = [0.0] * clients
    failures: list[BaseException] = []
    barrier = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            try:
                t0 = time.perf_counter()
                send(http, request_for(i, 0))
                firsts[i] = (time.perf_counter() - t0) * 1000
            except BaseException as exc:
                failures.append(exc)
            barrier.wait()
            if failures:
                return
            deadline = time.perf_counter() + limits.seconds
            out = per_thread[i]
            call = 1
            try:
                while len(out) < limits.max_calls and time.perf_counter() < deadline:
                    req = request_for(i, call)
                    t0 = time.perf_counter()
                    ok, failed, throttled = send(http, req)
                    out.append((time.perf_counter() - t0) * 1000)
                    totals[i][0] += ok
                    totals[i][1] += failed
                    totals[i][2] += throttled
                    call += 1
            except BaseException as exc:
                failures.append(exc)

    seconds = _common.run_threads(clients, client, barrier)
    if failures:
        raise failures[0]
    return Load(
        latencies=[x for lat in per_thread for x in lat],
        seconds=seconds,
        records=sum(t[0] for t in totals),
        errors=sum(t[1] for t in totals),
        throttled=sum(t[2] for t in totals),
        first_ms=firsts[0],
    )


def to_result(name: str, body: str, acks: str, clients: int, batch: int, load: Load) -> Result:
    return Result(
        name=name,
        body=body,
        acks=acks,
        clients=clients,
        batch_size=batch,
        calls=len(load.latencies),
        records=load.records,
        seconds=round(load.seconds, 3),
        records_per_s=round(load.records / load.seconds, 1) if load.seconds > 0 else 0.0,
        p50_ms=round(percentile(load.latencies, 50), 3),
        p99_ms=round(percentile(load.latencies, 99), 3),
        errors=load.errors,
        throttled=load.throttled,
        first_ms=round(load.first_ms, 3),
    )


# ---------------------------------------------------------------------------------------------- produce


def text_values(n: int, tag: str) -> list[str]:
    """``n`` strings whose JSON text (with quotes) is VALUE_BYTES bytes: what the json encoding stores."""
    return [f"{tag}-{i:012d}".ljust(VALUE_BYTES - 2, ".") for i in range(n)]


def results_counter(batch: int) -> Callable[[httpx.Response], tuple[int, int]]:
    def count(resp: httpx.Response) -> tuple[int, int]:
        ok = resp.content.count(b'"error":null')
        return ok, batch - ok

    return count


def arrow_counter(resp: httpx.Response) -> tuple[int, int]:
    return int(orjson.loads(resp.content)["count"]), 0


def produce_request(topic: str, body: str, acks: str, batch: int) -> Request:
    """The prepared request of one produce call (bodies are built once per row, outside the timing)."""
    path = f"/v1/topics/{topic}/records"
    if body == "arrow":
        raw = [v.encode() for v in text_values(batch, "a")]
        table = pa.table({"key": pa.nulls(batch, pa.binary()), "value": pa.array(raw, pa.binary())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        params: dict[str, str | int] = {"acks": acks, "partition": 0}
        return Request(
            "POST", path, params, {"content-type": ARROW}, sink.getvalue().to_pybytes(), arrow_counter
        )
    if body == "binary":
        payload = [
            base64.b64encode(v.encode().ljust(VALUE_BYTES, b".")).decode() for v in text_values(batch, "b")
        ]
        content = orjson.dumps({"records": [{"value": v} for v in payload]})
        params = {"acks": acks, "encoding": "binary"}
        return Request("POST", path, params, {"content-type": JSON}, content, results_counter(batch))
    records = [{"value": v} for v in text_values(batch, body[0])]
    if body == "ndjson":
        content = b"".join(orjson.dumps(r) + b"\n" for r in records)
        headers = {"content-type": NDJSON, "accept": NDJSON}
        return Request("POST", path, {"acks": acks}, headers, content, results_counter(batch))
    content = orjson.dumps({"records": records})
    return Request("POST", path, {"acks": acks}, {"content-type": JSON}, content, results_counter(batch))


def settle(tl: TopiclakeClient, topic: str, timeout_s: float = 5.0) -> None:
    """Wait until the topic's end offset stops moving (acks=1/0 rows leave commits behind them)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        end = tl.offsets(topic, 0)["end_offset"]
        if end == last:
            return
        last = end
        time.sleep(0.1)


def bench_produce(
    url: str, tl: TopiclakeClient, body: str, acks: str, clients: int, batch: int, limits: Limits
) -> Result:
    topic = f"produce-{body}-acks{acks}-c{clients}-b{batch}"
    tl.create_topic(topic, partitions=1)
    req = produce_request(topic, body, acks, batch)
    load = run_load(url, clients, limits, lambda _client, _call: req)
    if acks != "all":
        settle(tl, topic)
    return to_result(f"produce_{body}", body, acks, clients, batch, load)


def produce_matrix(smoke: bool) -> list[tuple[str, str, int, int]]:
    """(body, acks, clients, batch) of every produce row."""
    if smoke:
        rows = [(body, "all", 1, 100) for body in BODIES]
        rows += [("json", acks, 1, 100) for acks in ACKS[1:]]
        rows += [("json", "all", 4, 1)]
        return rows
    return [(b, a, c, n) for c in CLIENTS for a in ACKS for n in BATCH_SIZES for b in BODIES]


# ---------------------------------------------------------------------------------------------- fetch


def fill(tl: TopiclakeClient, topic: str, records: int) -> None:
    """``records`` values of VALUE_BYTES into partition 0 of a new topic, in Arrow batches of 1,000."""
    tl.create_topic(topic, partitions=1)
    for start in range(0, records, 1000):
        n = min(1000, records - start)
        table = pa.table({"value": pa.array([v.encode() for v in text_values(n, "f")], pa.binary())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        tl.produce_arrow(topic, 0, sink.getvalue().to_pybytes())


def small_commits(tl: TopiclakeClient, topic: str, commits: int) -> None:
    """``commits`` single-record produce requests with acks=all, one after another: one file each."""
    tl.create_topic(topic, partitions=1)
    value = text_values(1, "s")[0]
    for _ in range(commits):
        tl.produce(topic, [{"value": value}], acks="all")


def fetch_counter(resp: httpx.Response) -> tuple[int, int]:
    offset = int(resp.request.url.params["offset"])
    return int(resp.headers["x-topiclake-next-offset"]) - offset, 0


def fetch_load(url: str, topic: str, end: int, batch: int, arrow: bool, limits: Limits, wrap: bool) -> Load:
    """One client reading ``batch`` records per request from offset 0 on (back to 0 at the end if
    ``wrap``, else always from 0). Answers are not decoded: records are counted from next-offset."""
    state = {"offset": 0}
    headers = {"accept": ARROW if arrow else JSON}

    def request_for(_client: int, _call: int) -> Request:
        offset = state["offset"]
        if wrap:
            state["offset"] = offset + batch if offset + batch < end else 0
        params: dict[str, str | int] = {"offset": offset, "max_records": batch, "max_bytes": 64 * 1024 * 1024}
        return Request(
            "GET", f"/v1/topics/{topic}/partitions/0/records", params, headers, None, fetch_counter
        )

    return run_load(url, 1, limits, request_for)


# ---------------------------------------------------------------------------------------------- report


def add_ratios(results: list[Result]) -> None:
    raw = {r.batch_size: r for r in results if r.name == RAW}
    for r in results:
        ref = raw.get(r.batch_size)
        if ref is None or not r.name.startswith(("produce", RAW)):
            continue
        r.records_per_s_vs_raw = round(r.records_per_s / ref.records_per_s, 3) if ref.records_per_s else None
        r.p50_vs_raw = round(r.p50_ms / ref.p50_ms, 3) if ref.p50_ms else None


def add_targets(results: list[Result]) -> None:
    """DESIGN §9's targets, for the rows they are about (compared, never asserted)."""
    for r in results:
        if r.name == "produce_json" and r.acks == "all" and r.batch_size == 1000 and r.clients == 1:
            r.target, r.meets_target = "≥ 250,000 rec/s", r.records_per_s >= 250_000
        elif r.name == "produce_arrow" and r.acks == "all" and r.batch_size == 1000 and r.clients == 1:
            ratio = r.records_per_s_vs_raw or 0.0
            r.target, r.meets_target = "≥ 0.5 x raw", ratio >= 0.5
        elif r.name.startswith("produce") and r.acks == "all" and r.batch_size == 1 and r.clients >= 32:
            r.target = "≥ 3,000 rec/s, p99 ≤ 20 ms"
            r.meets_target = r.records_per_s >= 3000 and r.p99_ms <= 20
        elif r.name.startswith("fetch_tail"):
            r.target, r.meets_target = "≥ 500,000 rec/s", r.records_per_s >= 500_000
        elif r.name == "fetch_historic_small_files":
            r.target, r.meets_target = "p50 ≤ 20 ms", r.p50_ms <= 20


def machine(sizes: Sizes) -> dict[str, str]:
    return _common.machine(
        httpx=httpx.__version__,
        gateway="topiclake serve, 1 uvicorn worker, default broker settings",
        data=f"{sizes.fetch_records:,} records for fetches, {sizes.small_files:,} single-record commits",
    )


def markdown(results: list[Result], info: dict[str, str]) -> str:
    def num(x: float | None, digits: int = 2) -> str:
        return "" if x is None else f"{x:,.{digits}f}"

    lines = [
        "# HTTP benchmark",
        "",
        ", ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        f"Values of {VALUE_BYTES} B, one fresh topic of one partition per produce row. 'x raw' is records/s "
        "divided by raw_delta_rs_append's of the same batch size, measured in this run. Targets from "
        "DESIGN §9 (2-core machine); never asserted.",
        "",
        "| name | body | acks | clients | batch | calls | records/s | x raw | p50 ms | p99 ms | errors "
        "| target | met |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        met = "" if r.meets_target is None else ("yes" if r.meets_target else "no")
        errors = f"{r.errors:,}" + (f" (+{r.throttled:,} throttled)" if r.throttled else "")
        lines.append(
            f"| {r.name} | {r.body} | {r.acks} | {r.clients} | {r.batch_size:,} | {r.calls:,} | "
            f"{num(r.records_per_s, 0)} | {num(r.records_per_s_vs_raw)} | {num(r.p50_ms)} | "
            f"{num(r.p99_ms)} | {errors} | {r.target} | {met} |"
        )
    cold = [r for r in results if r.name == "fetch_historic_small_files"]
    if cold and cold[0].first_ms is not None:
        lines += [
            "",
            "First historic fetch of the small-files partition after the restart (not in p50/p99): "
            f"{cold[0].first_ms:.1f} ms.",
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- run


def run(
    limits: Limits, sizes: Sizes, smoke: bool, root: Path, progress: Callable[[str], None]
) -> list[Result]:
    results: list[Result] = []
    core_limits = core_commit.Limits(limits.seconds, limits.max_calls)
    for batch in (100, 1) if smoke else BATCH_SIZES:
        raw = core_commit.bench_raw(root, batch, core_limits)
        results.append(
            Result(RAW, "delta-rs", "all", 1, batch, raw.calls, raw.records, raw.seconds, raw.records_per_s,
                   raw.p50_ms, raw.p99_ms)
        )  # fmt: skip
        progress(f"{RAW} b{batch}")
    warehouse = root / "warehouse"
    log = root / "gateway.log"
    gw = GatewayProcess(warehouse, log)
    try:
        with TopiclakeClient(gw.url, timeout=60) as tl:
            for body, acks, clients, batch in produce_matrix(smoke):
                results.append(bench_produce(gw.url, tl, body, acks, clients, batch, limits))
                progress(f"produce {body} acks={acks} c{clients} b{batch}")
            fill(tl, "fetch", sizes.fetch_records)
            fetch_batch = min(1000, sizes.fetch_records)
            for arrow in (False, True):
                load = fetch_load(gw.url, "fetch", sizes.fetch_records, fetch_batch, arrow, limits, wrap=True)
                body = "arrow" if arrow else "json"
                results.append(to_result(f"fetch_tail_{body}", body, "-", 1, fetch_batch, load))
                progress(f"fetch tail {body}")
            small_commits(tl, "small-files", sizes.small_files)
            progress(f"{sizes.small_files} single-record commits")
    finally:
        gw.stop()
    gw = GatewayProcess(warehouse, log, env={"TOPICLAKE_BROKER__TAIL_CACHE_BYTES": "0"})
    try:
        load = fetch_load(
            gw.url, "small-files", sizes.small_files, sizes.small_files, False, limits, wrap=False
        )
        results.append(to_result("fetch_historic_small_files", "json", "-", 1, sizes.small_files, load))
        for arrow in (False, True):
            load = fetch_load(gw.url, "fetch", sizes.fetch_records, fetch_batch, arrow, limits, wrap=True)
            body = "arrow" if arrow else "json"
            results.append(to_result(f"fetch_historic_{body}", body, "-", 1, fetch_batch, load))
        progress("historic fetches")
    finally:
        gw.stop()
    add_ratios(results)
    add_targets(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a few seconds in all, tiny counts")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--seconds", type=float, default=1.0, help="time limit of one measurement")
    parser.add_argument(
        "--max-calls", type=int, default=2000, help="call limit per client of one measurement"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    limits = Limits(0.1, 3) if args.smoke else Limits(args.seconds, args.max_calls)
    sizes = Sizes(500, 10) if args.smoke else Sizes(20_000, 1000)
    started = time.perf_counter()

    def progress(what: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="topiclake-http-bench-") as tmp:
        results = run(limits, sizes, args.smoke, Path(tmp), progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "http.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    table = markdown(results, machine(sizes))
    (out / "http.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
