"""A broker producing to an S3 warehouse with acks=all, meant to be killed with SIGKILL.

Usage: ``python _s3_crash_worker.py WAREHOUSE_URI ACKFILE RUN``; storage options as JSON in
``TOPICLAKE_STORAGE_OPTIONS``. Three threads produce batches of 1-10 unique values; after each
acknowledged produce one line ``A value partition offset`` per record is appended to ACKFILE and fsynced.
``ACKFILE.ready`` appears after the first acknowledgement.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import threading

from topiclake.errors import TopicExists
from topiclake.platform import Broker, BrokerConfig, Record, Storage

TOPIC = "crash"


def main(argv: list[str]) -> int:
    uri, ack_path, run = argv[:3]
    options = json.loads(os.environ["TOPICLAKE_STORAGE_OPTIONS"])
    broker = Broker(Storage(uri, options), BrokerConfig(linger_ms=2))
    with contextlib.suppress(TopicExists):
        broker.create_topic(TOPIC, partitions=2)
    lock = threading.Lock()
    ack = open(ack_path, "a", encoding="ascii")  # noqa: SIM115 - lives as long as the process

    def produce(thread: int) -> None:
        rng = random.Random(thread)
        n = 0
        while True:
            values = [f"{run}-{thread}-{n + i}" for i in range(rng.randint(1, 10))]
            n += len(values)
            results = broker.produce(TOPIC, [Record(value=v.encode()) for v in values], acks="all")
            lines = [f"A {v} {r.partition} {r.offset}\n" for v, r in zip(values, results, strict=True)]
            if any(r.error is not None for r in results):
                continue  # not acknowledged: nothing to log
            with lock:
                ack.write("".join(lines))
                ack.flush()
                os.fsync(ack.fileno())
                if not os.path.exists(ack_path + ".ready"):
                    with open(ack_path + ".ready", "w", encoding="ascii") as f:
                        f.write("ready\n")

    threads = [threading.Thread(target=produce, args=(t,), daemon=True) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
