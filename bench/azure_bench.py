"""Commits on Azure (Azurite) vs S3 (the local S3 server), object-store append path vs delta-rs, in one run.

Each store sits behind the counting proxy, which delays every request by ``--delay-ms`` (20: a store in
the same region), so the rows compare round trips, not two loopback servers' speeds. Rows: one record
per ``broker.produce`` (acks=all, one caller: one commit per call), ``--calls`` calls, on

- ``s3`` / ``azure``: the broker's own append path (:mod:`topiclake.platform.log.object_append`: data
  PUTs, one conditional PUT of the log entry), and
- ``s3 delta-rs`` / ``azure delta-rs``: ``object_append=False``, delta-rs's commit.

Columns: records/s, p50/p99 latency, store requests per commit by operation. Only ratios within one run
mean anything. Usage: ``python bench/azure_bench.py [--calls N] [--delay-ms MS] [--out DIR]``;
writes ``DIR/azure.md``. Needs Azurite (``make tools-azurite``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import machine
from s3_bench import Row, bench_produce
from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.objectstore.azurite import AzuriteServer
from topiclake.platform import Broker, BrokerConfig, Storage


def _row(uri: str, options: dict[str, str], proxy: ProxyProcess, label: str, calls: int, fast: bool) -> Row:
    config = BrokerConfig(linger_ms=0, object_append=fast, maintenance_interval_ms=600_000)
    with Broker(Storage(uri, options), config) as broker:
        row = bench_produce(broker, "fast" if fast else "deltars", 1, calls, label, proxy)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    args = parser.parse_args()
    rows: list[Row] = []
    with LocalS3Server() as s3, AzuriteServer() as azurite:
        s3.create_bucket("bench")
        azurite.create_container("bench")
        s3_proxy = ProxyProcess(s3.endpoint).start()
        az_proxy = ProxyProcess(azurite.endpoint).start()
        try:
            s3_options = {
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": s3_proxy.endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
            az_uri = f"abfss://bench@{azurite.account}.dfs.core.windows.net/wh"
            stores = [
                ("s3", "s3://bench/wh", s3_options, s3_proxy),
                ("azure", az_uri, azurite.options(az_proxy.endpoint), az_proxy),
            ]
            for proxy in (s3_proxy, az_proxy):
                proxy.delay(args.delay_ms / 1000)
            for fast in (True, False):
                for name, uri, options, proxy in stores:
                    label = name if fast else f"{name} delta-rs"
                    rows.append(_row(uri, options, proxy, label, args.calls, fast))
                    print(f"{label}: {rows[-1].records_per_s:.1f} records/s", flush=True)
        finally:
            s3_proxy.stop()
            az_proxy.stop()
    lines = [
        "# Commits on Azure (Azurite) and S3, object-store append path vs delta-rs",
        "",
        ", ".join(f"{k} {v}" for k, v in machine().items()),
        "",
        f"Every store request delayed {args.delay_ms:g} ms by the proxy; "
        f"{args.calls} produce calls of 1 record, acks=all, one caller.",
        "",
        "| store | commit path | records/s | p50 ms | p99 ms | requests per commit |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        store, _, path = row.store.partition(" ")
        per = ", ".join(f"{op} {n:.1f}" for op, n in row.per_commit().items())
        lines.append(
            f"| {store} | {path or 'object append'} | {row.records_per_s:.1f} | {row.p50_ms:.1f} | "
            f"{row.p99_ms:.1f} | {per} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "azure.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
