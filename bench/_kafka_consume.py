"""kafka_bench's read rows, run the same way against topiclake and against Apache Kafka in one run.

Each target gets a 1- and a 3-partition topic filled by ProducerPerformance (1 MiB batches), read by
Kafka's ConsumerPerformance and by confluent-kafka's consumer right after the produce, and again by new
groups once the writes have settled ("history": for topiclake, once compaction has merged the files the
produce wrote; for Kafka, the same records read from its log segments a little later).
Apache Kafka comes from ``kafka-anchor.sh ONLY=serve`` (single-node KRaft on 127.0.0.1, free ports).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from _common import free_port, wait_port

Measure = Callable[[str, Callable[[], dict[str, float]]], None]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create a topic with Kafka's CreateTopics (works on both targets)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(60)


def read_rows(
    bootstrap: str,
    records: int,
    measure: Measure,
    settle: Callable[[str], None],
    producer_performance: Callable[..., dict[str, float]],
    consumer_performance: Callable[..., dict[str, float]],
    confluent_consume: Callable[..., dict[str, float]],
) -> None:
    """Fill c1 and c3, then measure each read twice: just written, and after ``settle(topic)``."""
    fill = ["acks=all", "batch.size=1048576", "linger.ms=10"]
    for parts in (1, 3):
        topic = f"c{parts}"
        create_topic(bootstrap, topic, parts)
        producer_performance(bootstrap, topic, records, fill)
        for when in ("just written", "history"):
            if when == "history":
                settle(topic)
            measure(
                f"ConsumerPerformance {parts}p ({when})",
                partial(consumer_performance, bootstrap, topic, records, f"cp-{parts}-{when[0]}"),
            )
            measure(
                f"confluent-kafka consume {parts}p ({when})",
                partial(confluent_consume, bootstrap, topic, records, f"ck-{parts}-{when[0]}"),
            )


@contextmanager
def apache_kafka(anchor: str, scratch: Path | None = None) -> Iterator[tuple[str, int]]:
    """Apache Kafka from ``kafka-anchor.sh ONLY=serve`` on free ports: (bootstrap, broker pid).

    ``scratch`` (default ``KA_DIR``, else the anchor's own /tmp/kafka-anchor) keeps its jars between runs;
    the anchor formats a fresh log directory there each time.
    """
    scratch = scratch or Path(os.environ.get("KA_DIR", "/tmp/kafka-anchor"))
    port, cport = free_port(), free_port()
    env = {**os.environ, "ONLY": "serve", "KA_DIR": str(scratch), "PORT": str(port), "CPORT": str(cport)}
    env.update(GATE_S="0", KAFKA_VERSION=os.environ.get("KAFKA_VERSION", "4.4.0"))
    (scratch / "out").mkdir(parents=True, exist_ok=True)
    ready = scratch / "out" / "ready"
    ready.unlink(missing_ok=True)
    with (scratch / "kafka_bench-anchor.log").open("ab") as log:
        proc = subprocess.Popen(["bash", anchor], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600  # a first run resolves Kafka's jars from Maven Central
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka did not start: see {log.name}")
                time.sleep(1)
            wait_port(port, 60)
            yield f"127.0.0.1:{port}", _listener_pid(port)
        finally:
            (scratch / "out" / "stop-serve").touch()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def _listener_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:``port`` (the Kafka JVM), 0 if not found."""
    inode = ""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # a JVM listens on a dual-stack (tcp6) socket
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[1].endswith(f":{port:04X}") and f[3] == "0A":  # LISTEN
                inode = f[9]
    if not inode:
        return 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(proc.name)
        except OSError:
            continue
    return 0


def rss_mib(pid: int) -> float | None:
    """VmRSS of ``pid`` in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
