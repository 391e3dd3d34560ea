"""Transactions over the Kafka listener against Apache Kafka, in one run: Kafka's own ProducerPerformance,
acks=all, plain and in transactions (``--transactional-id``, ``--transaction-duration-ms``), first against a
real Apache Kafka (``kafka-anchor.sh ONLY=serve``: single-node KRaft on 127.0.0.1), then against
``topiclake serve --kafka-port`` over a fresh warehouse. Each target gets the same fresh 1-partition topics.
Every load is bounded by a record count and a timeout.

    python bench/kafka_txn_bench.py --anchor ../shared/tools/kafka-anchor.sh --records 300000
    python bench/kafka_txn_bench.py --records 100000             # topiclake only
    python bench/kafka_txn_bench.py --anchor ... --variant base=/tmp/base/src --variant new=src   # A/B

``--variant NAME=SRC`` (repeatable) measures topiclake once per source tree (its ``PYTHONPATH``), one after
the other in the same run; without it, the tree this process imports.

Results: ``bench/results/kafka_txn.md`` and ``kafka_txn.json`` (records/s, average and p99 latency, and the
ratio topiclake / Kafka of each row).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _common import GatewayProcess, free_port, machine
from _kafka_consume import apache_kafka
from kafka_bench import RESULTS, producer_performance

#: (label, ProducerPerformance options beyond the producer properties, producer properties)
SCENARIOS: list[tuple[str, tuple[str, ...], list[str]]] = [
    ("acks=all, no transactions", (), ["acks=all"]),
    (
        "transactions of 100 ms",
        ("--transactional-id", "bench-txn-100", "--transaction-duration-ms", "100"),
        [],
    ),
    (
        "transactions of 1,000 ms",
        ("--transactional-id", "bench-txn-1000", "--transaction-duration-ms", "1000"),
        [],
    ),
]


def create_topics(bootstrap: str, names: list[str]) -> None:
    """1-partition topics, created with CreateTopics (the anchor's Kafka creates none on first use)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(60)


def run_all(bootstrap: str, records: int, prefix: str) -> list[dict[str, float | str]]:
    create_topics(bootstrap, [f"{prefix}{i}" for i in range(len(SCENARIOS))])
    rows: list[dict[str, float | str]] = []
    for i, (label, options, props) in enumerate(SCENARIOS):
        measured = producer_performance(bootstrap, f"{prefix}{i}", records, props, options)
        rows.append({"scenario": label, **measured})
        print(prefix, rows[-1], flush=True)
    return rows


def kafka_rows(anchor: str, records: int, scratch: Path) -> list[dict[str, float | str]]:
    """Start Apache Kafka with the anchor script (ONLY=serve), measure, stop it."""
    with apache_kafka(anchor, scratch) as (bootstrap, _pid):
        return run_all(bootstrap, records, "kafka-txn-")


def topiclake_rows(records: int, src: str | None = None) -> list[dict[str, float | str]]:
    env = {"PYTHONPATH": os.path.abspath(src)} if src else None
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        gw = GatewayProcess(Path(tmp) / "wh", Path(tmp) / "gateway.log", env=env, kafka_port=port)
        try:
            rows = run_all(f"127.0.0.1:{port}", records, "tl-txn-")
            rss = gw.rss_mb()
        finally:
            gw.stop()
    for row in rows:
        row["rss_mib"] = rss
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000, help="records per ProducerPerformance run")
    parser.add_argument("--anchor", help="path of kafka-anchor.sh: measure Apache Kafka first, same run")
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=SRC: topiclake of that source tree (repeatable)"
    )
    args = parser.parse_args()
    kafka: list[dict[str, float | str]] = []
    if args.anchor:
        scratch = Path(tempfile.mkdtemp(prefix="kafka-txn-anchor-"))
        try:
            kafka = kafka_rows(args.anchor, args.records, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    variants = [v.split("=", 1) for v in args.variant] or [["topiclake", ""]]
    ours = {name: topiclake_rows(args.records, src or None) for name, src in variants}
    lines = ["# Transactions: ProducerPerformance, Apache Kafka and topiclake in one run", ""]
    lines += [f"- {k}: {v}" for k, v in machine(records=str(args.records)).items()]
    lines += ["", "| scenario | Kafka rec/s | topiclake rec/s | ratio | topiclake avg / p99 ms |"]
    lines += ["|---|---:|---:|---:|---:|"]
    for name, rows in ours.items():
        for i, row in enumerate(rows):
            theirs = float(kafka[i]["rec_per_s"]) if kafka else 0.0
            mine = float(row["rec_per_s"])
            ratio = f"{mine / theirs:.2f}" if theirs else "-"
            label = row["scenario"] if len(ours) == 1 else f"{row['scenario']} ({name})"
            lines.append(
                f"| {label} | {theirs:,.0f} | {mine:,.0f} | {ratio} | "
                f"{float(row['avg_ms']):.1f} / {float(row['p99_ms']):.0f} |"
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kafka_txn.md").write_text("\n".join(lines) + "\n")
    found = {"kafka": kafka, **({"topiclake": ours["topiclake"]} if list(ours) == ["topiclake"] else ours)}
    (RESULTS / "kafka_txn.json").write_text(json.dumps(found, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
