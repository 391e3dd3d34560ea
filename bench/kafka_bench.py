"""Kafka listener throughput: Kafka's own ProducerPerformance (and confluent-kafka) against topiclake, and,
with ``--anchor``, against a real Apache Kafka 4.x broker in the same run.

topiclake is ``topiclake serve --kafka-port`` in a subprocess on 127.0.0.1 over a temporary warehouse.
ProducerPerformance comes from the kafka-tools jars (resolved once from Maven Central into
``~/.cache/topiclake/jars``, see tests/kafka/kafka_jars.py). ``--anchor PATH`` runs the project's Kafka
anchor script (``ONLY=a``: Apache Kafka from the same Maven Central jars, single-node KRaft on 127.0.0.1,
ProducerPerformance acks=all 1 and 3 partitions) and appends its table, so the ratio comes from one run on
one machine. Every load is bounded by a record count and a timeout.

    python bench/kafka_bench.py --records 200000
    python bench/kafka_bench.py --records 1000000 --anchor ../shared/tools/kafka-anchor.sh
    python bench/kafka_bench.py --records 100000 --profile     # py-spy samples the gateway per scenario

``--profile`` writes ``bench/results/kafka_profile_<n>.txt`` per scenario: py-spy's collapsed stacks
(``--nonblocking``, every thread, idle excluded), the input of any flame-graph tool.

Results: ``bench/results/kafka.md`` and ``kafka.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from _common import GatewayProcess, free_port, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kafka"))
from kafka_jars import classpath

RESULTS = Path(__file__).parent / "results"
_PP = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency.*?([\d.]+) ms 99th", re.M
)


def producer_performance(bootstrap: str, topic: str, records: int, props: list[str]) -> dict[str, float]:
    """One ProducerPerformance run (100-byte records, unthrottled): records/s, avg and p99 latency."""
    cmd = ["java", "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance", "--topic", topic]
    cmd += ["--num-records", str(records), "--record-size", "100", "--throughput", "-1"]
    cmd += ["--producer-props", f"bootstrap.servers={bootstrap}", *props]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = _PP.search(out.stdout)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"ProducerPerformance failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    return {"records": float(m[1]), "rec_per_s": float(m[2]), "avg_ms": float(m[3]), "p99_ms": float(m[4])}


def confluent_produce(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """confluent-kafka async produce, idempotent acks=all, 100-byte values: records/s."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    value = b"x" * 100
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return {"records": float(records), "rec_per_s": records / elapsed}


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling process ``pid`` (all threads, without pausing it) into ``out`` until SIGINT."""
    out.parent.mkdir(exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    cmd = [str(spy), "record", "--nonblocking", "--threads", "-r", "100", "-f", "raw", "-o", str(out)]
    proc = subprocess.Popen([*cmd, "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the load starts
    return proc


SCENARIOS = [
    ("ProducerPerf 1p acks=all (client defaults)", 1, ["acks=all"]),
    ("ProducerPerf 3p acks=all (client defaults)", 3, ["acks=all"]),
    (
        "ProducerPerf 1p acks=all batch.size=1MiB linger.ms=10",
        1,
        ["acks=all", "batch.size=1048576", "linger.ms=10"],
    ),
    ("ProducerPerf 1p acks=1 (client defaults)", 1, ["acks=1"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--anchor", help="path of kafka-anchor.sh: also measure Apache Kafka (ONLY=a)")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway during each scenario")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        gw = GatewayProcess(Path(tmp) / "wh", Path(tmp) / "gateway.log", kafka_port=port)
        bootstrap = f"127.0.0.1:{port}"
        try:
            for i, (label, parts, props) in enumerate(SCENARIOS):
                topic = f"pp{i}"
                httpx.post(f"{gw.url}/v1/topics", json={"name": topic, "partitions": parts}, timeout=30)
                spy = _spy(gw.proc.pid, RESULTS / f"kafka_profile_{i}.txt") if args.profile else None
                try:
                    measured = producer_performance(bootstrap, topic, args.records, props)
                finally:
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                        spy.wait(60)
                rows.append({"target": "topiclake", "scenario": label, **measured})
                print(rows[-1], flush=True)
            httpx.post(f"{gw.url}/v1/topics", json={"name": "ck", "partitions": 1}, timeout=30)
            rows.append(
                {
                    "target": "topiclake",
                    "scenario": "confluent-kafka async produce 1p acks=all",
                    **confluent_produce(bootstrap, "ck", args.records),
                }
            )
            print(rows[-1], flush=True)
        finally:
            gw.stop()
    anchor = ""
    if args.anchor:
        env = {"KAFKA_VERSION": "4.4.0", **os.environ, "ONLY": "a", "N": str(args.records), "REPEATS": "1"}
        out = subprocess.run(["bash", args.anchor], capture_output=True, text=True, env=env, timeout=3600)
        anchor = out.stdout[-6000:]
    RESULTS.mkdir(exist_ok=True)
    facts = machine(records=str(args.records), note="shared 2-core machine: numbers are indicative only")
    (RESULTS / "kafka.json").write_text(json.dumps({"machine": facts, "rows": rows}, indent=2))
    lines = [
        "# Kafka listener throughput",
        "",
        f"Machine: {facts}",
        "",
        "| target | scenario | records/s | avg ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            r["target"],
            r["scenario"],
            f"{r['rec_per_s']:.0f}",
            r.get("avg_ms", ""),
            r.get("p99_ms", ""),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if anchor:
        lines += ["", "## Apache Kafka, same run (kafka-anchor.sh ONLY=a)", "", anchor]
    (RESULTS / "kafka.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
