"""Broker memory under Kafka reads: the gateway's RSS while ProducerPerformance writes N records to one
partition and a confluent-kafka consumer reads them all back, sampled every 0.25 s.

    python bench/kafka_rss.py --records 1000000
    python bench/kafka_rss.py --records 10000000 --env MALLOC_ARENA_MAX=0   # a setting of this run's broker

Rows: RSS after start, after the produce, the peak while reading, at the end (after the read), and the
consumer's rate. Every load is bounded by a record count and a timeout. Results: ``bench/results/
kafka_rss.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from _common import GatewayProcess, free_port, machine
from kafka_bench import confluent_consume, producer_performance

RESULTS = Path(__file__).parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the broker")
    args = parser.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    n = args.records
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        gw = GatewayProcess(Path(tmp) / "wh", Path(tmp) / "gateway.log", env=env, kafka_port=port)
        bootstrap = f"127.0.0.1:{port}"
        peak = [0.0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                peak[0] = max(peak[0], gw.rss_mb() or 0.0)

        try:
            time.sleep(2)
            rows.append(("RSS after start, MiB", f"{gw.rss_mb():.0f}"))
            httpx.post(f"{gw.url}/v1/topics", json={"name": "r", "partitions": 1}, timeout=30)
            fill = ["acks=all", "batch.size=1048576", "linger.ms=10"]
            pp = producer_performance(bootstrap, "r", n, fill)
            rows.append(("produce records/s", f"{pp['rec_per_s']:,.0f}"))
            rows.append(("RSS after the produce, MiB", f"{gw.rss_mb():.0f}"))
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            read = confluent_consume(bootstrap, "r", n, "rss")
            stop.set()
            sampler.join()
            rows.append(("consume records/s", f"{read['rec_per_s']:,.0f}"))
            rows.append(("RSS peak while reading, MiB", f"{peak[0]:.0f}"))
            rows.append(("RSS after the read, MiB", f"{gw.rss_mb():.0f}"))
            time.sleep(5)
            rows.append(("RSS 5 s later, MiB", f"{gw.rss_mb():.0f}"))
        finally:
            stop.set()
            gw.stop()
    facts = machine(records=str(n), env=" ".join(args.env) or "defaults")
    lines = ["# Broker RSS under a Kafka read", "", f"Machine: {facts}", "", "| row | value |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kafka_rss.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
