"""bench/http_bench.py runs end to end in smoke mode and writes its results (no assertions on speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "http_bench.py"


def test_http_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    results = json.loads((tmp_path / "http.json").read_text())
    assert isinstance(results, list)
    rows = {(r["name"], r["body"], r["acks"], r["clients"], r["batch_size"]) for r in results}
    for batch in (1, 100):
        assert ("raw_delta_rs_append", "delta-rs", "all", 1, batch) in rows
    for body in ("json", "binary", "ndjson", "arrow"):
        assert (f"produce_{body}", body, "all", 1, 100) in rows
    for acks in ("1", "0"):
        assert ("produce_json", "json", acks, 1, 100) in rows
    assert any(r[0] == "produce_json" and r[3] > 1 for r in rows)
    names = {r["name"] for r in results}
    assert {"fetch_tail_json", "fetch_tail_arrow", "fetch_historic_json", "fetch_historic_arrow"} <= names
    assert "fetch_historic_small_files" in names
    for r in results:
        for key in ("name", "records_per_s", "p50_ms", "p99_ms", "calls", "errors", "target"):
            assert key in r, (key, r)
        assert r["records_per_s"] > 0 and r["calls"] > 0, r
        assert r["p50_ms"] > 0 and r["p99_ms"] >= r["p50_ms"], r
        assert r["errors"] == 0, r
        if r["name"].startswith(("produce", "raw")):
            assert r["records_per_s_vs_raw"] > 0, r
    small = next(r for r in results if r["name"] == "fetch_historic_small_files")
    assert small["records"] == small["calls"] * small["batch_size"]  # every fetch got all the records
    assert small["target"] == "p50 ≤ 20 ms" and isinstance(small["meets_target"], bool)
    md = (tmp_path / "http.md").read_text()
    assert "| raw_delta_rs_append |" in md and "| target |" in md and "nproc:" in md
    assert "fetch_historic_small_files" in proc.stdout
