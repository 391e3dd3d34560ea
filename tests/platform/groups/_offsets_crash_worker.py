"""A process committing consumer-group offsets in a loop, for tests/platform/groups/test_offsets_crash.py.

Usage: ``python _offsets_crash_worker.py WAREHOUSE ACKFILE RUN``

Opens a broker on WAREHOUSE (creating topic ``o`` with PARTITIONS partitions, each given END records, if
missing); then THREADS threads each commit, for their own group ``g<thread>``, the offsets of every
partition at once, over and over: commit ``k`` gives every partition the offset ``k % (END + 1)`` and the
metadata ``RUN:k``. After each commit returns, the line ``A g<thread> RUN:k`` is appended to ACKFILE and
fsynced; ``ACKFILE.ready`` appears after the first. Killed with SIGKILL by the test.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

from topiclake.errors import TopicExists
from topiclake.platform import Broker, BrokerConfig, GroupCoordinator, Record, Storage

TOPIC = "o"
PARTITIONS = 24
END = 5
THREADS = 2


def main(argv: list[str]) -> int:
    warehouse, ack_path, run = argv
    broker = Broker(Storage(warehouse), BrokerConfig(linger_ms=0))
    try:
        broker.create_topic(TOPIC, partitions=PARTITIONS)
        for p in range(PARTITIONS):
            broker.produce(TOPIC, [Record(value=b"x") for _ in range(END)], partition=p)
    except TopicExists:
        pass
    coordinator = GroupCoordinator(broker)
    lock = threading.Lock()
    ack = open(ack_path, "a", encoding="ascii")  # noqa: SIM115 - lives as long as the process

    def loop(thread: int) -> None:
        try:
            k = 0
            while True:
                k += 1
                offsets = {(TOPIC, p): (k % (END + 1), f"{run}:{k}") for p in range(PARTITIONS)}
                coordinator.commit(f"g{thread}", None, -1, offsets)
                with lock:
                    ack.write(f"A g{thread} {run}:{k}\n")
                    ack.flush()
                    os.fsync(ack.fileno())
                    if not os.path.exists(ack_path + ".ready"):
                        with open(ack_path + ".ready", "w", encoding="ascii") as f:
                            f.write("ready\n")
        except BaseException:
            traceback.print_exc()
            os._exit(3)

    threads = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
