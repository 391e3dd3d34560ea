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
    python bench/kafka_bench.py --records 300000 --only consume   # ConsumerPerformance, confluent-kafka
    python bench/kafka_bench.py --only latency                   # EndToEndLatency acks=all

``--only consume`` fills a 1- and a 3-partition topic with ProducerPerformance, then reads each twice
with Kafka's ConsumerPerformance and with confluent-kafka's consumer (a group,
``fetch.queue.backoff.ms=0``): first right after the produce (the newest records in the tail cache, the
rest in the small files just written), then once the broker's compaction has merged those files
(history); each read row also gives the seconds to the first records (the group join and the first
fetches) and the rate after them. With ``--anchor`` the same read rows run against Apache Kafka
(``kafka-anchor.sh ONLY=serve``; its "history" is a read 30 s after the produce) in the same run.
``--only latency`` runs Kafka's EndToEndLatency (acks=all: send, ack,
poll back, one record at a time) and 32 confluent-kafka producers with one synchronous acks=all send each
(the anchor's row uses Java), and one confluent-kafka producer sending one record at a time to a consumer
of 1 and 3 partitions waiting at their end (the send's ack and the poll back timed apart: the consumer's
wake-up is their difference);
``--only consume,latency`` runs both. For the produce and latency rows the anchor (``--anchor``) runs
``ONLY=cmp`` (``ONLY=a`` for produce alone), so Kafka's rows come from the same run.

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
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx

from _common import GatewayProcess, free_port, machine
from _kafka_consume import apache_kafka, read_rows, rss_mib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kafka"))
from kafka_jars import classpath

RESULTS = Path(__file__).parent / "results"
_PP = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency.*?([\d.]+) ms 99th", re.M
)


def producer_performance(
    bootstrap: str, topic: str, records: int, props: list[str], options: tuple[str, ...] = ()
) -> dict[str, float]:
    """One ProducerPerformance run (100-byte records, unthrottled, more tool ``options`` such as
    ``--transactional-id``): records/s, avg and p99 latency."""
    cmd = [
        "java",
        "-cp",
        classpath(),
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        *options,
    ]
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


_CP_LINE = re.compile(r"^[\d-]+ [\d:.]+, [\d-]+ [\d:.]+, .*$", re.M)


def consumer_performance(bootstrap: str, topic: str, records: int, group: str) -> dict[str, float]:
    """Kafka's ConsumerPerformance (a group member, client defaults): records/s including the join, the
    join's seconds, and the rate without it."""
    cmd = ["java", "-cp", classpath(), "org.apache.kafka.tools.ConsumerPerformance"]
    cmd += ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records)]
    cmd += ["--group", group, "--timeout", "60000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = _CP_LINE.findall(out.stdout)
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"ConsumerPerformance failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    f = [x.strip() for x in lines[-1].split(",")]
    join_s = float(f[6]) / 1000  # rebalance time; f[9] is the rate without it
    return {"records": float(f[4]), "rec_per_s": float(f[5]), "join_s": join_s, "after": float(f[9])}


def confluent_consume(bootstrap: str, topic: str, records: int, group: str) -> dict[str, float]:
    """confluent-kafka group consumer (``fetch.queue.backoff.ms=0``), as the anchor's ck_consume: records/s
    from the subscribe, the seconds to the first records (the join and first fetches), the rate after."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 0,
        }
    )
    start = time.perf_counter()
    deadline = start + 300
    c.subscribe([topic])
    got = 0
    first = None
    while got < records and time.perf_counter() < deadline:
        got += sum(1 for m in c.consume(num_messages=10000, timeout=1.0) if m.error() is None)
        if got and first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    c.close()
    if got < records or first is None:
        raise RuntimeError(f"consumed {got} of {records}")
    after = got / (end - first) if end > first else 0.0
    return {"records": float(got), "rec_per_s": got / (end - start), "join_s": first - start, "after": after}


_E2E = re.compile(r"Avg latency: ([\d.]+) ms.*?50th = (\d+), 99th = (\d+)", re.S)


def end_to_end_latency(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """Kafka's EndToEndLatency, acks=all, 100-byte records (the tool reports whole milliseconds)."""
    cmd = ["java", "-cp", classpath(), "org.apache.kafka.tools.EndToEndLatency"]
    cmd += [bootstrap, topic, str(records), "all", "100"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = _E2E.search(out.stdout)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"EndToEndLatency failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    return {"records": float(records), "rec_per_s": 0.0, "avg_ms": float(m[1]), "p99_ms": float(m[3])}


def send_and_poll_back(bootstrap: str, topic: str, records: int, partitions: int) -> dict[str, float]:
    """One confluent-kafka producer (one synchronous acks=all send at a time, round robin over the
    partitions) and one consumer of every partition waiting at the end (``fetch.wait.max.ms=500``): the
    latency from send to the record polled back (avg/p99) and of the send's ack alone (ack_*): their
    difference is the consumer's wake-up."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"spb-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
            "fetch.queue.backoff.ms": 0,
        }
    )
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])

    def poll_back(value: bytes) -> None:
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None and m.value() == value:
                return
        raise RuntimeError("record not polled back in 30 s")

    for i in range(partitions):  # warm: connected, every partition fetched once
        p.produce(topic, b"warm", partition=i)
        p.flush(30)
        poll_back(b"warm")
    acks, e2e = [], []
    for i in range(records):
        value = b"%d" % i + b"x" * 95
        t0 = time.perf_counter()
        p.produce(topic, value, partition=i % partitions)
        if p.flush(30):
            raise RuntimeError("send not acknowledged in 30 s")
        acks.append(time.perf_counter() - t0)
        poll_back(value)
        e2e.append(time.perf_counter() - t0)
    c.close()
    acks.sort()
    e2e.sort()
    p99 = int(0.99 * (records - 1))
    return {
        "records": float(records),
        "rec_per_s": 0.0,
        "avg_ms": sum(e2e) / records * 1000,
        "p99_ms": e2e[p99] * 1000,
        "ack_avg_ms": sum(acks) / records * 1000,
        "ack_p99_ms": acks[p99] * 1000,
    }


def sync_producers(bootstrap: str, topic: str, threads: int, per_thread: int) -> dict[str, float]:
    """``threads`` confluent-kafka producers, each one synchronous acks=all send at a time (produce, then
    flush): records/s and the p99 of one send, as the anchor's 32-producer row (there: Java)."""
    from confluent_kafka import Producer

    lat: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        p.produce(topic, b"w")
        p.flush(30)  # connected and warm before the clock starts
        barrier.wait()
        mine = []
        for _ in range(per_thread):
            t0 = time.perf_counter()
            p.produce(topic, b"x" * 100)
            if p.flush(30):
                raise RuntimeError("send not acknowledged in 30 s")
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    barrier = threading.Barrier(threads + 1)
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join(300)
    elapsed = time.perf_counter() - start
    lat.sort()
    return {
        "records": float(len(lat)),
        "rec_per_s": len(lat) / elapsed,
        "avg_ms": sum(lat) / len(lat) * 1000,
        "p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1000,
    }


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


def _wait_compacted(warehouse: Path, topic: str, timeout_s: float = 90) -> int:
    """Wait until the broker's compaction stops merging ``topic``'s files; returns its active files."""
    from deltalake import DeltaTable

    from topiclake.platform.storage import Storage

    storage = Storage(str(warehouse))
    uri = storage.topic_uri(topic)
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    while time.monotonic() < deadline:
        seen.append(len(DeltaTable(uri, storage_options=storage.options()).file_uris()))
        if len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            break
        time.sleep(3)
    return seen[-1]


def _settle(warehouse: Path, topic: str) -> None:
    print(f"{topic}: {_wait_compacted(warehouse, topic)} active files", flush=True)


READERS = (producer_performance, consumer_performance, confluent_consume)


def kafka_read_rows(anchor: str, n: int) -> list[dict[str, object]]:
    """The read rows against Apache Kafka (``kafka-anchor.sh ONLY=serve``), "history" 30 s later."""
    rows: list[dict[str, object]] = []
    with apache_kafka(anchor) as (bootstrap, pid):

        def measure(label: str, fn: Callable[[], dict[str, float]]) -> None:
            rows.append({"target": "Apache Kafka", "scenario": label, **fn(), "rss_mib": rss_mib(pid)})
            print(rows[-1], flush=True)

        read_rows(bootstrap, n, measure, lambda _topic: time.sleep(30), *READERS)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--anchor", help="path of kafka-anchor.sh: also measure Apache Kafka")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway during each scenario")
    parser.add_argument(
        "--only", default="produce", help="comma-separated: produce, consume, latency, or all of them: all"
    )
    args = parser.parse_args()
    only = {"produce", "consume", "latency"} if args.only == "all" else set(args.only.split(","))
    rows: list[dict[str, object]] = []
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        gw = GatewayProcess(Path(tmp) / "wh", Path(tmp) / "gateway.log", kafka_port=port)
        bootstrap = f"127.0.0.1:{port}"
        step = iter(range(1000))

        def measure(label: str, fn: Callable[[], dict[str, float]]) -> None:
            i = next(step)
            spy = _spy(gw.proc.pid, RESULTS / f"kafka_profile_{i}.txt") if args.profile else None
            try:
                measured = fn()
            finally:
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                    spy.wait(60)
            rows.append({"target": "topiclake", "scenario": label, **measured, "rss_mib": gw.rss_mb()})
            print(rows[-1], flush=True)

        def create(topic: str, parts: int) -> None:
            httpx.post(f"{gw.url}/v1/topics", json={"name": topic, "partitions": parts}, timeout=30)

        try:
            if "produce" in only:
                for i, (label, parts, props) in enumerate(SCENARIOS):
                    create(f"pp{i}", parts)
                    measure(label, partial(producer_performance, bootstrap, f"pp{i}", n, props))
                create("ck", 1)
                measure(
                    "confluent-kafka async produce 1p acks=all",
                    partial(confluent_produce, bootstrap, "ck", n),
                )
            if "consume" in only:
                settle = partial(_settle, Path(tmp) / "wh")
                read_rows(bootstrap, n, measure, settle, *READERS)
            if "latency" in only:
                create("e2e", 1)
                measure("EndToEndLatency 1p acks=all", partial(end_to_end_latency, bootstrap, "e2e", 3000))
                for parts in (1, 3):
                    create(f"spb{parts}", parts)
                    measure(
                        f"confluent-kafka send, ack, poll back {parts}p acks=all",
                        partial(send_and_poll_back, bootstrap, f"spb{parts}", 1000, parts),
                    )
                create("sync", 1)
                measure(
                    "32 confluent-kafka producers, one synchronous acks=all send each",
                    partial(sync_producers, bootstrap, "sync", 32, 200),
                )
        finally:
            gw.stop()
    if args.anchor and "consume" in only:
        rows += kafka_read_rows(args.anchor, n)
    anchor = ""
    if args.anchor and only - {"consume"}:
        mode = "a" if only == {"produce"} else "cmp"
        env = {"KAFKA_VERSION": "4.4.0", **os.environ, "ONLY": mode, "N": str(args.records), "REPEATS": "1"}
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
        "| target | scenario | records/s | avg ms | p99 ms | ack avg / p99 ms | join s / rec/s after "
        "| broker RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            r["target"],
            r["scenario"],
            f"{r['rec_per_s']:.0f}",
            r.get("avg_ms", ""),
            r.get("p99_ms", ""),
            f"{r['ack_avg_ms']:.2f} / {r['ack_p99_ms']:.2f}" if "ack_avg_ms" in r else "",
            f"{r['join_s']:.2f} / {r['after']:,.0f}" if "join_s" in r else "",
            f"{r['rss_mib']:.0f}" if r.get("rss_mib") else "",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if anchor:
        lines += ["", f"## Apache Kafka, same run (kafka-anchor.sh ONLY={env['ONLY']})", "", anchor]
    (RESULTS / "kafka.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
