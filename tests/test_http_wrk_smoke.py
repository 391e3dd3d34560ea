"""bench/http_wrk.py (the hot path under wrk) runs end to end in smoke mode and writes every row (speed is
never asserted: only that each load ran without errors and the ratios were computed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "http_wrk.py"

pytestmark = pytest.mark.slow


def test_http_wrk_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"bench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    doc = json.loads((tmp_path / "http_wrk.json").read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    for name in (
        "bare FastAPI POST, 1 record",
        "topiclake 1 record, acks=0",
        "topiclake 1 record, acks=1",
        "topiclake 1 record, acks=all",
        "topiclake 1,000 JSON records, acks=all, 4 conn",
        "topiclake 1,000 Arrow IPC records, acks=all, 4 conn",
        "topiclake tail fetch 1,000 as Arrow",
    ):
        row = rows[name]
        assert row["requests_per_s"] > 0 and row["errors"] == 0, row
    assert rows["topiclake 1 record, acks=all"]["ratio"] is not None
    assert "| topiclake 1 record, acks=all |" in (tmp_path / "http_wrk.md").read_text()
    assert doc["machine"]["wrk"]
