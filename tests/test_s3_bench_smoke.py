"""bench/s3_bench.py runs end to end in smoke mode and writes its results (no assertions on speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "s3_bench.py"

pytestmark = pytest.mark.slow


def test_s3_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    results = json.loads((tmp_path / "s3.json").read_text())
    rows = {(r["name"], r["store"]) for r in results["rows"]}
    for store in ("local", "s3"):
        for name in ("raw_append", "produce_1", "produce_1000", "produce_32_threads"):
            assert (name, store) in rows
    for r in results["rows"]:
        assert r["records_per_s"] > 0, r
        if r["store"] == "s3":
            assert r["per_commit"].get("PUT", 0) >= 1, r  # the proxy counted the commits' PUTs
    assert [r["name"] for r in results["steady"]] == [
        "steady_maintenance_on",
        "steady_maintenance_off",
        "idle_maintenance_on",
    ]
    assert (tmp_path / "s3.md").read_text().startswith("# Object storage vs local disk")
