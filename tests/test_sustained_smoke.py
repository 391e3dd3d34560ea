"""bench/sustained.py runs end to end in smoke mode: the report has its shape, every acknowledged record
was read back exactly once, the commits are measured and compaction keeps the active files under their
bound (correctness and boundedness, so they are asserted; speed never is)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sustained.py"

WINDOW_KEYS = {
    "window",
    "records_per_s",
    "produce_p50_ms",
    "produce_p99_ms",
    "gateway_produce_p99_ms",
    "commits_per_s",
    "records_per_commit",
    "commit_p50_ms",
    "commit_p99_ms",
    "active_files_max",
    "active_files_end",
    "active_files_bound",
    "delta_log_files_max",
    "rss_mb_end",
}


@pytest.mark.parametrize(("store", "producers"), [("local", "wrk"), ("s3", "python")])
def test_sustained_smoke(tmp_path: Path, store: str, producers: str) -> None:
    """On S3 too (the local S3 server behind the counting proxy): compaction there commits from memory in
    rounds (platform/log/_object_compaction.py); through delta-rs per run it let files pass the bound
    within the smoke run's 15 s (86 against 61, issue 25). The local run's producers are wrk
    (bench/_sustained_wrk.py, issue 25 item 3), the S3 run's the Python threads: each client is checked
    record by record without a run of its own."""
    options = ["--smoke", "--store", store, "--producers", producers, "--out", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *options],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads((tmp_path / "sustained.json").read_text())
    md = (tmp_path / "sustained.md").read_text()
    assert "| window |" in md and "| target |" in md

    windows = report["windows"]
    assert len(windows) >= 2
    for w in windows:
        assert set(w) >= WINDOW_KEYS, WINDOW_KEYS - set(w)
        assert w["records"] > 0 and w["records_per_s"] > 0, w
        assert w["produce_p99_ms"] >= w["produce_p50_ms"] > 0, w
        assert len(w["active_files_end"]) == report["config"]["partitions"], w
        assert w["active_files_bound"] > 0 and w["delta_log_files_max"] > 0, w
        assert w["rss_mb_end"] and w["rss_mb_end"] > 0, w
    assert sum(w["commits"] for w in windows) > 0
    # the commit path reports what it did, whichever path committed (issue 25: the local append path did not)
    for w in windows:
        assert w["commit_p99_ms"] is not None and w["commit_p99_ms"] >= w["commit_p50_ms"] > 0, w
        assert w["records_per_commit"] and w["records_per_commit"] >= 1, w
        assert w["gateway_records_per_commit"] and w["gateway_records_per_commit"] >= 1, w
    # Files per partition stay under the compaction policy's bound in every sample. Without it (issue 25:
    # higher tiers never merged while appends filled tier 0 every round) the smoke run's 15 s of 32
    # single-record producers already passed it: tier 0 alone held ~60 files a partition at each round.
    # The bound's last term is what a partition commits during one round: N while rounds keep up, more
    # when a starved machine slows a round (a CI run under load: 86 files against 61 once, a round of
    # ~1 s at ~50 commits/s), so each window adds the commits of its longest round beyond N.
    assert any(w["maintenance_round_max_s"] for w in windows), windows  # rounds ran, /metrics told of them
    for w in windows:
        longest_round = w["maintenance_round_max_s"] or 0
        assert 0 <= w["round_allowance"] <= math.ceil(w["commits_per_s"] * longest_round), w
        assert w["within_bound"], (
            w["window"],
            w["active_files_max"],
            w["active_files_bound"],
            w["round_allowance"],
        )
    files = next(v for v in report["verdicts"] if v["target"].startswith("active files"))
    assert files["met"] is True, files

    targets = {v["target"] for v in report["verdicts"]}
    assert any(t.startswith("produce p99") for t in targets)
    assert any(t.startswith("commit p99") for t in targets)
    assert any(t.startswith("active files") for t in targets)
    assert any(t.startswith("gateway RSS") for t in targets)

    check = report["check"]
    assert check["acked"] > 0
    assert report["config"]["producer_client"] == producers
    if producers == "wrk":  # one run per window: only the requests in flight at a run's end go unanswered,
        # and the one in flight on a connection wrk saw fail (it reconnects and sends a new one)
        lost = sum(w["client_errors"] for w in windows)
        assert check["uncertain"] <= report["config"]["producers"] * len(windows) + lost, (check, lost)
        assert sum(w["produce_errors"] for w in windows) == 0, windows
    for reader in ("reader", "catchup_reader", "table"):
        assert check[reader]["acked_missing"] == 0, check[reader]
        assert check[reader]["duplicate_reads"] == 0, check[reader]
    assert check["group"]["acked_missing"] == 0, check["group"]
    assert check["exactly_once"] is True, check
    verdict = next(v for v in report["verdicts"] if v["target"].startswith("every acknowledged"))
    assert verdict["met"] is True, verdict
