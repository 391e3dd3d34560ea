"""Store requests per commit and per MB of an in-process broker on the local S3 server, by what they touch.

The local S3 server behind the counting proxy with ``--delay-ms`` per request (20: about S3 Standard's
small-object latency); one broker (default settings, maintenance on), a topic of 3 partitions;
``--threads`` callers each producing ``--records`` keyed records of ~100 B per call, acks=all. After 3 s
of warm-up, every request of ``--seconds`` is recorded (``ProxyProcess.record``) and classified by key:
data file, log entry, checkpoint, ``_last_checkpoint``, ``_system`` tables, listings. Counts, not speed:
the ratios per commit and per MB are what S3 bills; the records/s is this machine's.

Usage: ``python bench/s3_requests.py [--seconds 15] [--threads 4] [--records 1000]``; prints the table.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from urllib.parse import unquote

from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.platform import Broker, BrokerConfig, Record, Storage

VALUE = b"x" * 92


def kind(path: str) -> str:
    """What a request's path (and listing prefix) touches."""
    path = unquote(path)
    for needle, name in (
        ("_system/", "_system tables"),
        ("_last_checkpoint", "_last_checkpoint"),
        (".checkpoint.parquet", "checkpoint"),
    ):
        if needle in path:
            return name
    if "_delta_log" in path:
        return "log entry" if path.endswith(".json") else "log listing"
    return "data file" if path.endswith(".parquet") else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    with LocalS3Server() as server, ProxyProcess(server.endpoint) as proxy:
        server.create_bucket("requests")
        proxy.delay(args.delay_ms / 1000)
        options = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }
        with Broker(Storage("s3://requests/wh", options), BrokerConfig()) as broker:
            broker.create_topic("t", partitions=3)
            stop = threading.Event()
            sent = [0]
            lock = threading.Lock()

            def work() -> None:
                n = 0
                while not stop.is_set():
                    batch = [
                        Record(key=b"key-%04d" % ((n + j) % 10_000), value=VALUE) for j in range(args.records)
                    ]
                    results = broker.produce("t", batch, acks="all")
                    assert all(r.error is None for r in results), results[0]
                    with lock:
                        sent[0] += args.records
                    n += args.records

            threads = [threading.Thread(target=work) for _ in range(args.threads)]
            for t in threads:
                t.start()
            time.sleep(3)
            log = broker.log("t")
            commits0, sent0 = log.commits, sent[0]
            proxy.record(True)
            time.sleep(args.seconds)
            requests = proxy.requests()
            commits, records = log.commits - commits0, sent[0] - sent0
            proxy.record(False)
            stop.set()
            for t in threads:
                t.join()
            stats = log.maintainer.stats
    mb = records * (8 + len(VALUE)) / 1e6
    ops = Counter(r[1] for r in requests)
    print(f"{records / args.seconds:,.0f} records/s, {commits} commits, {mb / commits:.2f} MB per commit")
    billed = len(requests) - ops["DELETE"]  # S3 does not bill DELETEs
    print(f"requests per MB {len(requests) / mb:.2f} (without DELETE {billed / mb:.2f})")
    print("per commit: " + ", ".join(f"{op} {n / commits:.2f}" for op, n in sorted(ops.items())))
    print(f"maintenance: {stats.checkpoints} checkpoints, {stats.compactions} runs compacted\n")
    print("| request | touches | count | per commit |\n|---|---|---:|---:|")
    for (op, what), n in Counter((r[1], kind(r[3])) for r in requests).most_common():
        print(f"| {op} | {what} | {n} | {n / commits:.2f} |")


if __name__ == "__main__":
    main()
