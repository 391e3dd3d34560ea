"""The HTTP hot path measured with wrk (compiled), beside a bare FastAPI route and raw delta-rs, in one run.

Run: ``.venv/bin/python bench/http_wrk.py [--smoke] [--seconds S] [--out DIR]`` (``make bench`` runs it).

Every row is one wrk run (one thread) against one uvicorn worker on 127.0.0.1; wrk and the server share
the machine's cores. References measured in the same run: a bare FastAPI ``async def`` POST that parses the
same body and a GET (bench/_bare_app.py), and raw delta-rs appends of 100,000-record batches (the physical
limit of a commit; the 100,000-record Arrow row gets a topic of its own for the same comparison). Targets
are issue 17's, as ratios to those references. Writes ``DIR/http_wrk.json`` and
``DIR/http_wrk.md``; speed is never asserted. The second core (1 broker process vs 2) is measured by
``make bench-cluster`` (bench/cluster_bench.py).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import orjson
import pyarrow as pa

import _common
import _partition_rows
import _wrk
import core_commit
from _common import GatewayProcess, free_port

VALUE = "x" * 100
JSON = {"Content-Type": "application/json"}


@dataclass
class Row:
    name: str
    connections: int
    records_per_request: int
    requests_per_s: float
    records_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    reference: str = ""
    ratio: float | None = None
    target: str = ""


def json_body(n: int) -> bytes:
    return orjson.dumps({"records": [{"value": VALUE} for _ in range(n)]})


def binary_body(n: int) -> bytes:
    v = base64.b64encode(VALUE.encode()).decode()
    return orjson.dumps({"records": [{"value": v} for _ in range(n)]})


def arrow_body(n: int) -> bytes:
    table = pa.table({"value": pa.array([VALUE.encode()] * n, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


class Bare:
    """The bare FastAPI reference in its own uvicorn process."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        here = str(Path(__file__).parent)
        cmd = [sys.executable, "-m", "uvicorn", "--app-dir", here, "_bare_app:app", "--port", str(self.port)]
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "warning"], stdout=self._out, stderr=subprocess.STDOUT
        )
        if not _common.wait_healthy(self.url, self.proc, 30):
            self.stop()
            raise RuntimeError(f"the bare reference did not start; see {log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self._out.close()


def load(
    name: str,
    url: str,
    paths: list[str],
    body: bytes,
    per: int,
    conns: int,
    seconds: float,
    root: Path,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    bodies: list[bytes] | None = None,
) -> Row:
    slug = name.replace(" ", "_").replace("/", "_").replace(",", "")
    r = _wrk.run(url, paths, body, root, slug, conns, seconds, method, headers, bodies)
    return Row(
        name,
        conns,
        per,
        round(r.requests_per_s, 1),
        round(r.requests_per_s * per, 1),
        r.p50_ms,
        r.p99_ms,
        r.errors,
    )


def run_partitions(seconds: float, root: Path) -> tuple[list[Row], dict[str, str]]:
    """Only the keyed rows over 1, 3, 12 and 64 partitions (``--only partitions``)."""
    env = {"TOPICLAKE_KAFKA_PORT": "0", "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0"}
    gw = GatewayProcess(root / "wh", root / "gateway.log", env=env)
    try:
        rows: list[Row] = _partition_rows.rows(gw.url, seconds, root, load)
    finally:
        gw.stop()
    _partition_rows.ratios({r.name: r for r in rows})
    loadavg = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return rows, _common.machine(wrk=_wrk.version(), seconds=str(seconds), loadavg_1_5_15_min_at_end=loadavg)


def run(seconds: float, smoke: bool, root: Path) -> tuple[list[Row], dict[str, str]]:
    rows: list[Row] = []
    limits = core_commit.Limits(seconds=max(1.0, seconds / 2), max_calls=5 if smoke else 50)
    raw_batch = 10_000 if smoke else 100_000
    raw = core_commit.bench_raw(root, raw_batch, limits)
    bare = Bare(root / "bare.log")
    try:
        rows.append(
            load(
                "bare FastAPI POST, 1 record",
                bare.url,
                ["/v1/topics/t/records"],
                json_body(1),
                1,
                32,
                seconds,
                root,
                headers=JSON,
            )
        )
        rows.append(load("bare FastAPI GET", bare.url, ["/healthz"], b"", 0, 32, seconds, root, "GET"))
        rows.append(
            load(
                "bare FastAPI POST, 1,000 records",
                bare.url,
                ["/v1/topics/t/records"],
                json_body(1000),
                1000,
                4,
                seconds,
                root,
                headers=JSON,
            )
        )
    finally:
        bare.stop()
    env = {"TOPICLAKE_KAFKA_PORT": "0", "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0"}
    gw = GatewayProcess(root / "wh", root / "gateway.log", env=env)
    try:
        for topic in ("t", "big", "bulk", "tail"):
            httpx.post(
                f"{gw.url}/v1/topics", json={"name": topic, "partitions": 1}, timeout=30
            ).raise_for_status()
            httpx.post(f"{gw.url}/v1/topics/{topic}/records", content=json_body(1), headers=JSON, timeout=30)
        rows.append(load("topiclake GET /healthz", gw.url, ["/healthz"], b"", 0, 32, seconds, root, "GET"))
        for acks in ("0", "1", "all"):
            rows.append(
                load(
                    f"topiclake 1 record, acks={acks}",
                    gw.url,
                    [f"/v1/topics/t/records?acks={acks}"],
                    json_body(1),
                    1,
                    32,
                    seconds,
                    root,
                    headers=JSON,
                )
            )
        for conns in (1, 4):
            rows.append(
                load(
                    f"topiclake 1,000 JSON records, acks=all, {conns} conn",
                    gw.url,
                    ["/v1/topics/big/records"],
                    json_body(1000),
                    1000,
                    conns,
                    seconds,
                    root,
                    headers=JSON,
                )
            )
        rows.append(
            load(
                "topiclake 1,000 base64 records, acks=all, 4 conn",
                gw.url,
                ["/v1/topics/big/records?encoding=binary"],
                binary_body(1000),
                1000,
                4,
                seconds,
                root,
                headers=JSON,
            )
        )
        rows.append(
            load(
                "topiclake 1,000 Arrow IPC records, acks=all, 4 conn",
                gw.url,
                ["/v1/topics/big/records?partition=0"],
                arrow_body(1000),
                1000,
                4,
                seconds,
                root,
                headers={"Content-Type": "application/vnd.apache.arrow.stream"},
            )
        )
        time.sleep(2)  # the earlier rows' compactions run on: let them finish, as raw delta-rs has none
        rows.append(
            load(
                f"topiclake {raw_batch:,} Arrow IPC records, acks=all, 1 conn",
                gw.url,
                ["/v1/topics/bulk/records?partition=0"],  # a topic of its own, like the raw reference
                arrow_body(raw_batch),
                raw_batch,
                1,
                seconds,
                root,
                headers={"Content-Type": "application/vnd.apache.arrow.stream"},
            )
        )
        rows += _partition_rows.rows(
            gw.url, seconds, root, load, (1, 12) if smoke else _partition_rows.PARTITIONS
        )
        for _ in range(5):  # a tail of 5,000 records to read
            httpx.post(f"{gw.url}/v1/topics/tail/records", content=json_body(1000), headers=JSON, timeout=30)
        fetch = ["/v1/topics/tail/partitions/0/records?offset=1&max_records=1000"]
        rows.append(
            load("topiclake tail fetch 1,000 as JSON", gw.url, fetch, b"", 1000, 4, seconds, root, "GET")
        )
        rows.append(
            load(
                "topiclake tail fetch 1,000 as Arrow",
                gw.url,
                fetch,
                b"",
                1000,
                4,
                seconds,
                root,
                "GET",
                {"Accept": "application/vnd.apache.arrow.stream"},
            )
        )
    finally:
        gw.stop()
    # historic: 1,000 one-record commits, no maintenance, no tail cache
    env_hist = {**env, "TOPICLAKE_BROKER__MAINTENANCE": "false", "TOPICLAKE_BROKER__TAIL_CACHE_BYTES": "0"}
    gw = GatewayProcess(root / "wh-hist", root / "gateway-hist.log", env=env_hist)
    try:
        httpx.post(f"{gw.url}/v1/topics", json={"name": "h", "partitions": 1}, timeout=30).raise_for_status()
        with httpx.Client(timeout=30) as http:
            for _ in range(100 if smoke else 1000):
                http.post(f"{gw.url}/v1/topics/h/records", content=json_body(1), headers=JSON)
        n = 100 if smoke else 1000
        hist = [f"/v1/topics/h/partitions/0/records?offset=0&max_records={n}"]
        rows.append(
            load(
                f"topiclake historic fetch {n} from {n} files", gw.url, hist, b"", n, 1, seconds, root, "GET"
            )
        )
    finally:
        gw.stop()
    by = {r.name: r for r in rows}
    post, get, parse = (
        by["bare FastAPI POST, 1 record"],
        by["bare FastAPI GET"],
        by["bare FastAPI POST, 1,000 records"],
    )

    def ratio(name: str, ref: Row | float, label: str, target: str) -> None:
        r = by[name]
        base = ref.requests_per_s if isinstance(ref, Row) else ref
        value = r.requests_per_s if isinstance(ref, Row) else r.records_per_s
        r.reference, r.ratio, r.target = label, round(value / base, 2) if base else None, target

    ratio("topiclake GET /healthz", get, "bare GET", "")
    ratio("topiclake 1 record, acks=0", post, "bare POST", ">= 0.8")
    ratio("topiclake 1 record, acks=1", post, "bare POST", ">= 0.8")
    ratio("topiclake 1 record, acks=all", post, "bare POST", ">= 0.6, >= 3,000/s, p99 <= 20 ms")
    for name in by:
        if name.startswith("topiclake 1,000") and "Arrow" not in name:
            ratio(name, raw.records_per_s, f"raw delta-rs {raw_batch:,}", ">= 0.4, >= 250,000/s")
    ratio(
        "topiclake 1,000 Arrow IPC records, acks=all, 4 conn",
        raw.records_per_s,
        f"raw delta-rs {raw_batch:,}",
        ">= 0.7",
    )
    ratio(
        f"topiclake {raw_batch:,} Arrow IPC records, acks=all, 1 conn",
        raw.records_per_s,
        f"raw delta-rs {raw_batch:,}",
        ">= 0.7 (same batch size)",
    )
    by["topiclake tail fetch 1,000 as JSON"].target = ">= 500,000/s"
    by["topiclake tail fetch 1,000 as Arrow"].target = ">= 1,000,000/s"
    next(r for r in rows if r.name.startswith("topiclake historic")).target = "p50 <= 20 ms"
    _partition_rows.ratios(by)
    rows.append(
        Row(
            f"raw delta-rs append, {raw_batch:,} records",
            1,
            raw_batch,
            0,
            round(raw.records_per_s, 1),
            raw.p50_ms,
            raw.p99_ms,
            0,
        )
    )
    rows.append(
        Row(
            "(bare parse of a 1,000-record body)",
            parse.connections,
            1000,
            parse.requests_per_s,
            parse.records_per_s,
            parse.p50_ms,
            parse.p99_ms,
            0,
        )
    )
    loadavg = "/".join(f"{x:.1f}" for x in os.getloadavg())  # a shared machine shows here
    info = _common.machine(wrk=_wrk.version(), seconds=str(seconds), loadavg_1_5_15_min_at_end=loadavg)
    return rows, info


def markdown(rows: list[Row], info: dict[str, str]) -> str:
    lines = [
        "# HTTP hot path under wrk",
        "",
        "| what | conns | requests/s | records/s | p50 ms | p99 ms | errors | vs | ratio | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(
            f"| {r.name} | {r.connections} | {r.requests_per_s:,.0f} | {r.records_per_s:,.0f} | "
            f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.errors} | {r.reference} | {ratio} | {r.target} |"
        )
    facts = ", ".join(f"{k} {v}" for k, v in info.items())
    return "\n".join(lines) + f"\n\nMachine: {facts}.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds, to keep the benchmark working")
    parser.add_argument("--seconds", type=float, default=None, help="wrk duration of each row (default 10)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument(
        "--only",
        choices=["partitions"],
        help="only the keyed rows over topics of 1, 3, 12 and 64 partitions",
    )
    args = parser.parse_args(argv)
    if not _wrk.available():
        print("wrk is not installed: `make tools-wrk` installs it (apt-get install wrk)", file=sys.stderr)
        return 2
    seconds = args.seconds or (1.0 if args.smoke else 10.0)
    with tempfile.TemporaryDirectory(prefix="http-wrk-") as tmp:
        if args.only == "partitions":
            rows, info = run_partitions(seconds, Path(tmp))
        else:
            rows, info = run(seconds, args.smoke, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "http_wrk.json").write_text(
        json.dumps({"machine": info, "rows": [asdict(r) for r in rows]}, indent=2)
    )
    md = markdown(rows, info)
    (args.out / "http_wrk.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
