"""A producing broker process for tests/platform/log/test_crash.py, meant to be killed with SIGKILL.

Usage: ``python _crash_worker.py WAREHOUSE ACKFILE SEED RUN [--idempotent]``

Opens a broker on WAREHOUSE (creating topic ``crash`` with 3 partitions if missing), then 4 producer
threads produce small batches (1-20 records, unique values ``RUN-THREAD-N``) with acks=all until killed.
After each acknowledged produce, one line per record ``A value partition offset`` is appended to ACKFILE and
fsynced, so a line exists only for a record whose commit was acknowledged.

With ``--idempotent`` each thread is an idempotent producer of its own, writes every record to an explicit
partition, and before each produce appends (and fsyncs) an intent line
``I thread producer_id base_sequence partition value value ...`` so that the test can retry the last batch
that was never acknowledged. ``ACKFILE.ready`` is created once the first produce was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import threading
import traceback

from topiclake.errors import TopicExists
from topiclake.platform import Broker, BrokerConfig, ProducerInfo, Record, Storage

TOPIC = "crash"
PARTITIONS = 3
THREADS = 4


class AckLog:
    """Appends lines to a file and fsyncs them before returning."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="ascii")  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()
        self._ready = path + ".ready"
        self._is_ready = False

    def write(self, lines: list[str]) -> None:
        with self._lock:
            self._file.write("".join(line + "\n" for line in lines))
            self._file.flush()
            os.fsync(self._file.fileno())

    def ready(self) -> None:
        with self._lock:
            if not self._is_ready:
                self._is_ready = True
                with open(self._ready, "w", encoding="ascii") as f:
                    f.write("ready\n")


def produce_plain(broker: Broker, log: AckLog, run: str, thread: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + thread)
    n = 0
    while True:
        size = rng.randint(1, 20)
        values = [f"{run}-{thread}-{n + i}" for i in range(size)]
        n += size
        results = broker.produce(TOPIC, [Record(value=v.encode()) for v in values], acks="all")
        for r in results:
            if r.error is not None:
                raise r.error
        log.write([f"A {v} {r.partition} {r.offset}" for v, r in zip(values, results, strict=True)])
        log.ready()


def produce_idempotent(broker: Broker, log: AckLog, run: str, thread: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + thread)
    producer = broker.init_producer()
    seq = 0
    n = 0
    while True:
        size = rng.randint(1, 20)
        partition = rng.randrange(PARTITIONS)
        values = [f"{run}-{thread}-{n + i}" for i in range(size)]
        n += size
        log.write([f"I {thread} {producer.producer_id} {seq} {partition} {' '.join(values)}"])
        records = [Record(value=v.encode(), partition=partition) for v in values]
        info = ProducerInfo(producer.producer_id, 0, seq)
        results = broker.produce(TOPIC, records, acks="all", producer=info)
        for r in results:
            if r.error is not None:
                raise r.error
        seq += size
        log.write([f"A {v} {r.partition} {r.offset}" for v, r in zip(values, results, strict=True)])
        log.ready()


def main(argv: list[str]) -> int:
    warehouse, ack_path, seed_text, run = argv[:4]
    idempotent = "--idempotent" in argv[4:]
    seed = int(seed_text)
    # TOPICLAKE_CRASH_BROKER_CONFIG: JSON of BrokerConfig fields (e.g. aggressive maintenance)
    overrides = json.loads(os.environ.get("TOPICLAKE_CRASH_BROKER_CONFIG", "{}"))
    broker = Broker(Storage(warehouse), BrokerConfig(**{"linger_ms": 2, **overrides}))
    with contextlib.suppress(TopicExists):
        broker.create_topic(TOPIC, partitions=PARTITIONS)
    log = AckLog(ack_path)
    target = produce_idempotent if idempotent else produce_plain
    failed = threading.Event()

    def body(thread: int) -> None:
        try:
            target(broker, log, run, thread, seed)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            failed.set()

    threads = [threading.Thread(target=body, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    failed.wait()  # the test kills this process; getting here means a producer thread failed
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
