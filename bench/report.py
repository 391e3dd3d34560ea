"""Publish the latest benchmark tables: bench/results/*.md -> docs/benchmarks.md (committed).

``bench/results/`` is not committed (each run rewrites it); ``make bench-report`` copies the newest tables,
each with the machine and date it was measured on, into ``docs/benchmarks.md``, which the README links.

Usage: ``python bench/report.py [--results DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).parent
SECTIONS = [
    ("latest.md", "Core: group commit vs raw delta-rs (`make bench`, bench/core_commit.py)"),
    (
        "http_wrk.md",
        "HTTP hot path under wrk, beside bare FastAPI and raw delta-rs (`make bench`, bench/http_wrk.py)",
    ),
    ("http.md", "HTTP gateway, Python clients (`make bench`, bench/http_bench.py)"),
    ("sustained.md", "Sustained load, 10 minutes (`make bench-sustained`, bench/sustained.py)"),
    ("cluster.md", "1, 2 and 3 brokers, failover (`make bench-cluster`, bench/cluster_bench.py)"),
]

HEADER = """# Benchmarks: the latest published run

Made by `make bench-report` from `bench/results/` after `make bench` and `make bench-sustained`. Each
table names the machine and the date it was measured on; compare ratios to the raw delta-rs reference of
the same run, not absolute numbers across runs (this kind of machine drifts by up to ~1.8 times). What each
row and column means: [bench/README.md](../bench/README.md). Targets are DESIGN §9's; they are measured
here, never asserted in tests.
"""


def build(results: Path) -> str:
    """The report's Markdown from the result tables present in ``results``."""
    parts = [HEADER]
    found = 0
    for name, title in SECTIONS:
        path = results / name
        if not path.exists():
            parts.append(f"\n## {title}\n\nNot measured in this run (`{path}` missing).\n")
            continue
        found += 1
        body = path.read_text().split("\n", 1)[1].lstrip()  # drop the table's own H1
        parts.append(f"\n## {title}\n\n{body.rstrip()}\n")
    if not found:
        raise SystemExit(f"no benchmark results in {results}: run `make bench` first")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Write the report; print where."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    args.out.write_text(build(args.results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
