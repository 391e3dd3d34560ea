"""The local S3 server alone: how a GET, a PUT and a LIST of a small prefix slow down with the bucket's size.

Issue 28 / 25: the 10-minute sustained run on S3 fell from 191 to 67 records/s while produce p99 rose
from 403 ms to 2.2 s. A broker's state (file index, replays) or the store? This measures the store
without any broker: the dev server (``topiclake.objectstore.devserver``, moto, atomic per key),
no proxy, no delay, one client (boto3). The bucket is filled with N objects of 1 KB under
``data/`` (as data files accumulate until a vacuum deletes them), then, at each N, it times
``--ops`` requests of each kind against a prefix of 20 keys (``_delta_log/``, as a table's log is
after cleanup): GET of one key, PUT of a new key, LIST of the prefix.

Usage: ``python bench/s3_server_scale.py [--sizes 0,2000,10000,30000] [--ops 50]``; prints a markdown
table (median and p90 milliseconds per request).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3

from topiclake.objectstore import LocalS3Server

BUCKET = "scale"


def _timed(ops: int, call: Callable[[int], Any]) -> tuple[float, float]:
    times = []
    for i in range(ops):
        started = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,2000,10000,30000")
    parser.add_argument("--ops", type=int, default=50)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with LocalS3Server() as server:
        server.create_bucket(BUCKET)
        s3 = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        body = b"x" * 1024
        for i in range(20):
            s3.put_object(Bucket=BUCKET, Key=f"_delta_log/{i:020d}.json", Body=body)
        print(
            "| objects in bucket | GET ms (p50 / p90) | PUT ms | LIST of 20 keys ms | fill rate objects/s |"
        )
        print("|---:|---|---|---|---:|")
        have = 0
        put_n = 0
        log = "_delta_log/"
        for size in sizes:
            started = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda i: s3.put_object(Bucket=BUCKET, Key=f"data/{i:08d}.parquet", Body=body),
                        range(have, size),
                    )
                )
            rate = (size - have) / max(time.perf_counter() - started, 1e-9)
            have = max(have, size)
            get = _timed(args.ops, lambda i: s3.get_object(Bucket=BUCKET, Key=f"{log}{i % 20:020d}.json"))
            put = _timed(
                args.ops, lambda i, n=put_n: s3.put_object(Bucket=BUCKET, Key=f"new/{n + i}", Body=body)
            )
            put_n += args.ops
            lst = _timed(args.ops, lambda _i: s3.list_objects_v2(Bucket=BUCKET, Prefix="_delta_log/"))
            print(
                f"| {size:,} | {get[0]:.1f} / {get[1]:.1f} | {put[0]:.1f} / {put[1]:.1f} "
                f"| {lst[0]:.1f} / {lst[1]:.1f} | {rate:,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
