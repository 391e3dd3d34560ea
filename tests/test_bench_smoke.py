"""bench/core_commit.py runs end to end in smoke mode and writes its results (no assertions on speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "core_commit.py"


def test_core_commit_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    results = json.loads((tmp_path / "latest.json").read_text())
    assert isinstance(results, list)
    names = {(r["name"], r["batch_size"]) for r in results}
    for batch in (1, 100, 1000, 10_000):
        assert ("raw_delta_rs_append", batch) in names
        assert ("produce_arrow", batch) in names
        assert ("produce_records", batch) in names
    assert ("produce_32_threads", 1) in names
    for r in results:
        assert r["records_per_s"] > 0, r
        assert r["p50_ms"] > 0 and r["p99_ms"] >= r["p50_ms"], r
        assert r["commits"] > 0, r
        assert r["records_per_s_vs_raw"] > 0, r
    raw = [r for r in results if r["name"] == "raw_delta_rs_append"]
    assert all(r["records_per_s_vs_raw"] == 1.0 for r in raw)
    md = (tmp_path / "latest.md").read_text()
    assert "| raw_delta_rs_append |" in md and "nproc:" in md and "deltalake:" in md
    assert "raw_delta_rs_append" in proc.stdout
