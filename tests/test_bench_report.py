"""bench/report.py publishes the result tables it finds, each under its section, and refuses none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPORT = Path(__file__).resolve().parents[1] / "bench" / "report.py"


def _run(results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPORT), "--results", str(results), "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_report_copies_each_table_with_its_machine(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    table = "# core commit benchmark\n\ndate: X, nproc: 2\n\n| a |\n|---|\n| 1 |\n"
    (results / "latest.md").write_text(table)
    out = tmp_path / "benchmarks.md"
    proc = _run(results, out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "## Core: group commit vs raw delta-rs" in text
    assert "date: X, nproc: 2" in text and "| 1 |" in text
    assert "# core commit benchmark" not in text  # the table's own title is replaced by the section
    assert "Not measured in this run" in text  # http.md and sustained.md are missing


def test_report_without_results_fails(tmp_path: Path) -> None:
    proc = _run(tmp_path, tmp_path / "out.md")
    assert proc.returncode != 0
    assert "run `make bench` first" in proc.stderr
    assert not (tmp_path / "out.md").exists()
