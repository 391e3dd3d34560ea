"""Commit latency with a long Delta log window: 24 h of log at 10 commits/s vs the 10 s window.

Issue 15, item 3. A topic's time travel reaches back as far as its ``_delta_log`` entries are kept
(``broker.log_retention_ms``). This measures what keeping them costs the broker's commits.

Method (simulated history, then real commits): a broker creates topic ``t`` with a 24 h window and makes a
few real commits, then a checkpoint; the script then adds ``N`` log entries as they would be after
``N / 10`` seconds at 10 commits/s: commit files ``<v>.json`` (a commitInfo-only commit, hard links of one
file, so writing 864,000 of them takes seconds) and a checkpoint every ``checkpoint_interval`` versions
(hard links of the real checkpoint: the table's state does not change in a no-op commit), and points
``_last_checkpoint`` at the newest. Then a broker reopens the table (maintenance on, window 24 h: it deletes
nothing) and one thread produces single records with acks=all; the row reports the broker's commit
latency p50/p99 (``TopicLog.commit_latencies_ms``), the per-request latency, and the time to open the
table with delta-rs. Rows grow the same table: 10 s (~100 entries, today's default), 1 h, 6 h, 24 h.

``.venv/bin/python bench/log_window.py [--commits 200] [--hours 0.0028,1,6,24] [--out DIR]``
Writes ``DIR/log_window.json`` and ``DIR/log_window.md`` (default ``bench/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from _common import machine, percentile
from topiclake.platform import Broker, BrokerConfig, Record, Storage

COMMITS_PER_S = 10
LINKS_PER_TEMPLATE = 50_000
#: A row stops after this long (at least MIN_COMMITS commits): a commit over a 24 h log takes seconds.
ROW_BUDGET_S = 60.0
MIN_COMMITS = 3
DAY_MS = 24 * 3600 * 1000


def _config() -> BrokerConfig:
    return BrokerConfig(linger_ms=0, log_retention_ms=DAY_MS, maintenance_interval_ms=500)


def _template(log: Path, version: int) -> tuple[Path, Path]:
    """A no-op commit file and the newest real checkpoint, to hard-link as simulated history."""
    commit = log / "_template_commit.json"
    info = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "engineInfo": "bench-simulated",
            "isBlindAppend": True,
        }
    }
    commit.write_text(json.dumps(info) + "\n")
    checkpoint = log / f"{version:020d}.checkpoint.parquet"
    assert checkpoint.exists(), f"no checkpoint at version {version}"
    return commit, checkpoint


def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def _extend(log: Path, first: int, last: int, interval: int, commit: Path, checkpoint: Path) -> None:
    """Versions first..last as simulated history; checkpoints every ``interval`` versions."""
    newest_cp = None
    for v in range(first, last + 1):
        if (v - first) % LINKS_PER_TEMPLATE == 0:  # a file has at most 65,000 hard links on ext4
            commit = _copy(commit, log / f"_template_commit_{v}.json")
            checkpoint = _copy(checkpoint, log / f"_template_checkpoint_{v}.parquet")
        os.link(commit, log / f"{v:020d}.json")
        if v % interval == 0:
            os.link(checkpoint, log / f"{v:020d}.checkpoint.parquet")
            newest_cp = v
    if newest_cp is not None:
        meta = json.loads((log / "_last_checkpoint").read_text())
        meta["version"] = newest_cp
        (log / "_last_checkpoint").write_text(json.dumps(meta))


def _measure(warehouse: str, commits: int) -> dict[str, Any]:
    uri = Storage(warehouse).topic_uri("t")
    started = time.perf_counter()
    DeltaTable(uri)
    open_ms = (time.perf_counter() - started) * 1000
    latencies: list[float] = []
    with Broker(Storage(warehouse), _config()) as broker:
        broker.produce("t", [Record(value=b"warm")])
        log = broker.log("t")
        del log.commit_latencies_ms[:]
        row_start = time.perf_counter()
        for i in range(commits):
            if i >= MIN_COMMITS and time.perf_counter() - row_start > ROW_BUDGET_S:
                break
            t0 = time.perf_counter()
            broker.produce("t", [Record(value=b"x" * 100, key=b"k%d" % i)])
            latencies.append((time.perf_counter() - t0) * 1000)
        commit_ms = list(log.commit_latencies_ms)
    return {
        "open_ms": round(open_ms, 1),
        "commit_p50_ms": round(percentile(commit_ms, 50) or 0, 2),
        "commit_p99_ms": round(percentile(commit_ms, 99) or 0, 2),
        "request_p50_ms": round(percentile(latencies, 50) or 0, 2),
        "request_p99_ms": round(percentile(latencies, 99) or 0, 2),
        "commits": len(commit_ms),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", type=int, default=200, help="measured commits per row")
    p.add_argument("--hours", default="0.0028,1,6,24", help="log windows to measure, hours, ascending")
    p.add_argument("--out", default=str(Path(__file__).with_name("results")))
    args = p.parse_args()
    hours = [float(h) for h in args.hours.split(",")]
    root = Path(tempfile.mkdtemp(prefix="log-window-"))
    rows: list[dict[str, Any]] = []
    try:
        warehouse = str(root / "wh")
        with Broker(Storage(warehouse), _config()) as broker:
            broker.create_topic("t", partitions=1)
            for _ in range(5):
                broker.produce("t", [Record(value=b"seed")])
        uri = Storage(warehouse).topic_uri("t")
        dt = DeltaTable(uri)
        dt.create_checkpoint()
        log = Path(uri) / "_delta_log"
        commit, checkpoint = _template(log, dt.version())
        interval = _config().checkpoint_interval
        for h in hours:
            wanted = int(h * 3600 * COMMITS_PER_S)
            have = len([n for n in os.listdir(log) if n.endswith(".json") and not n.startswith("_")])
            version = DeltaTable(uri).version()
            t0 = time.perf_counter()
            if wanted > have:
                # history lies BELOW the live table's versions in a real log; here it is appended above,
                # then the live checkpoint is re-pointed: the same file count and newest checkpoint
                _extend(log, version + 1, version + wanted - have, interval, commit, checkpoint)
            build_s = time.perf_counter() - t0
            entries = len(os.listdir(log))
            row = {
                "window_h": h,
                "log_entries": entries,
                "build_s": round(build_s, 1),
                **_measure(warehouse, args.commits),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    facts = machine(commits_per_row=str(args.commits), note="shared 2-core machine; compare rows, not runs")
    (out / "log_window.json").write_text(json.dumps({"machine": facts, "rows": rows}, indent=2))
    lines = [
        "| window | `_delta_log` files | open ms | commit p50 ms | commit p99 ms "
        "| request p50 ms | request p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        window = f"{r['window_h'] * 3600:.0f} s" if r["window_h"] < 1 else f"{r['window_h']:g} h"
        lines.append(
            f"| {window} | {r['log_entries']:,} | {r['open_ms']} | {r['commit_p50_ms']} "
            f"| {r['commit_p99_ms']} | {r['request_p50_ms']} | {r['request_p99_ms']} |"
        )
    table = "\n".join(lines)
    (out / "log_window.md").write_text(f"{table}\n\n{json.dumps(facts)}\n")
    print(table)


if __name__ == "__main__":
    main()
