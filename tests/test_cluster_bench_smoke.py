"""bench/cluster_bench.py runs end to end in smoke mode with wrk and writes its results (no assertions on
speed). wrk comes from Debian (`make test` and `make bench-cluster` install it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "cluster_bench.py"


@pytest.mark.slow
def test_cluster_bench_smoke(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (make tools-wrk)")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    results = json.loads((tmp_path / "cluster.json").read_text())
    rows = {(r["name"], r["brokers"]) for r in results}
    for brokers in (1, 3):  # smoke mode skips the 2-broker cluster: the same code as 3 (Cluster(size))
        assert {("produce_b1", brokers), ("produce_b1000", brokers)} <= rows
    assert not {brokers for _name, brokers in rows} - {1, 3}
    for r in results:
        if r["name"].startswith("produce"):
            assert r["requests"] > 0 and r["records_per_s"] > 0, r
            assert r["p99_ms"] >= r["p50_ms"] > 0, r
            assert r["errors"] == 0, r
    (fail,) = [r for r in results if r["name"] == "failover"]
    assert fail["brokers"] == 3 and fail["requests"] == 1 and len(fail["samples_ms"]) == 1
    md = (tmp_path / "cluster.md").read_text()
    assert "| produce_b1000 | 3 |" in md and "Failover with 3 brokers" in md and "wrk:" in md
