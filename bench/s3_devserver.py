"""The local S3 server alone: what a commit's requests cost, one request at a time against concurrent.

Issue 28: a commit on S3 is one PUT per data file (in parallel) and then one conditional PUT of the log
entry. The dev server (``topiclake.objectstore.devserver``, moto) served one request at a time
(``--locking serial``), so the three data-file PUTs of a 3-partition commit ran in series; it now runs
requests of other keys at once (``keyed``, the default). This times, per locking mode and per proxy
delay (none, and 20 ms per request as the benchmarks use), with the broker's own client (``S3Client``:
SigV4, pooled httpx) and no broker:

- one 250 kB PUT; three 250 kB PUTs in parallel; a conditional PUT of 2 kB;
- a "commit": three 250 kB PUTs in parallel, then a conditional PUT of 2 kB;
- eight such commits at once (8 threads, as 8 producers' commits of 8 topics would be).

Usage: ``python bench/s3_devserver.py [--rounds 30]``; prints a markdown table of median milliseconds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.platform.storage.s3_client import S3Client, s3_location

DATA = b"d" * 250_000
ENTRY = b"e" * 2_000
_names = itertools.count()


def _median_ms(rounds: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _measure(client: S3Client, pool: ThreadPoolExecutor, rounds: int) -> dict[str, float]:
    def put() -> None:
        client.put(f"data/{next(_names)}.parquet", DATA)

    def three() -> None:
        for f in [pool.submit(put) for _ in range(3)]:
            f.result()

    def entry() -> None:
        assert client.put_if_absent(f"_delta_log/{next(_names):020d}.json", ENTRY)

    def commit() -> None:
        three()
        entry()

    def eight() -> None:
        with ThreadPoolExecutor(8) as outer:
            for f in [outer.submit(commit) for _ in range(8)]:
                f.result()

    return {
        "one 250 kB PUT": _median_ms(rounds, put),
        "three 250 kB PUTs in parallel": _median_ms(rounds, three),
        "conditional PUT of 2 kB": _median_ms(rounds, entry),
        "commit (three PUTs, then the entry)": _median_ms(rounds, commit),
        "8 commits at once": _median_ms(max(3, rounds // 4), eight),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for locking in ("serial", "keyed"):
        with LocalS3Server(locking=locking) as server, ProxyProcess(server.endpoint) as proxy:
            server.create_bucket("bench")
            for delay_ms in (0, 20):
                proxy.delay(delay_ms / 1000)
                for endpoint, via in ((server.endpoint, "direct"), (proxy.endpoint, f"proxy +{delay_ms} ms")):
                    if via == "direct" and delay_ms:
                        continue
                    location = s3_location(
                        "s3://bench/wh",
                        {
                            "AWS_ACCESS_KEY_ID": "k",
                            "AWS_SECRET_ACCESS_KEY": "s",
                            "AWS_ENDPOINT_URL": endpoint,
                        },
                    )
                    assert location is not None
                    client = S3Client(location)
                    with ThreadPoolExecutor(16) as pool:
                        results[f"{locking}, {via}"] = _measure(client, pool, args.rounds)
                    client.close()
    columns = list(results)
    print("| median ms | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for what in next(iter(results.values())):
        print(f"| {what} | " + " | ".join(f"{results[c][what]:.1f}" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
