"""``topiclake serve --warehouse s3://...`` (and ``abfss://...``) with the store's usual environment
variables (``AWS_*``, ``AZURE_*``), driven by the CLI.

The gateway gets its endpoint, region and keys from ``AWS_*`` variables only (no storage options):
delta-rs reads them, and the commit probe does too. The CLI (topics, produce, consume with a group,
groups lag) talks HTTP to it; a second gateway over the same bucket finds everything again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

import httpx
import pytest
from s3_harness import S3Warehouse
from store_harness import Warehouse

from serve_process import serving

pytestmark = pytest.mark.slow


def _aws_env(s3: Warehouse) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "TOPICLAKE_"))}
    # S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, ...; Azure:
    # AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_ENDPOINT, AZURE_ALLOW_HTTP
    env.update({k.upper(): v for k, v in s3.options.items()})
    return env


@contextmanager
def _gateway(s3: Warehouse, **extra_env: str) -> Iterator[str]:
    with serving(s3.uri, {**_aws_env(s3), **extra_env}) as served:
        yield served.url
    assert "closed" in served.output[0], served.output[0]


def _cli(base: str, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "topiclake.cli", *args, "--url", base],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_serve_on_s3_with_aws_environment_and_the_cli(store: Warehouse) -> None:
    s3 = store  # and on Azure, configured by AZURE_* variables only
    with _gateway(s3) as base:
        ready = httpx.get(f"{base}/readyz").json()
        assert ready["warehouse"] == s3.uri
        _cli(base, "topics", "create", "orders", "--partitions", "2")
        _cli(
            base,
            "produce",
            "orders",
            "--key-separator",
            ":",
            stdin="".join(f"k{i}:v{i}\n" for i in range(10)),
        )
        out = _cli(
            base, "consume", "orders", "--group", "billing", "--from-beginning", "--max-messages", "10"
        )
        assert sorted(out.split()) == sorted(f"v{i}" for i in range(10))
    with _gateway(s3) as base:  # a new gateway: topics, records and the group's offsets from the bucket
        lag = json.loads(_cli(base, "groups", "lag", "billing", "--json"))
        assert lag["total_lag"] == 0
        assert sum(p["end_offset"] for p in lag["partitions"]) == 10
        _cli(base, "produce", "orders", stdin="after\n")
        lag = json.loads(_cli(base, "groups", "lag", "billing", "--json"))
        assert lag["total_lag"] == 1


def test_gateway_counts_object_store_requests_on_metrics(s3: S3Warehouse) -> None:
    with _gateway(s3, TOPICLAKE_COUNT_OBJECT_STORE_REQUESTS="true") as base:
        _cli(base, "topics", "create", "counted", "--partitions", "1")
        before = s3.proxy.counts().get("PUT", 0)
        _cli(base, "produce", "counted", stdin="a\nb\n")
        assert s3.proxy.counts().get("PUT", 0) > before  # the gateway's own proxy forwards to the store
        text = httpx.get(f"{base}/metrics").text
        puts = [
            line
            for line in text.splitlines()
            if line.startswith('topiclake_object_store_requests_total{op="PUT"}')
        ]
        assert puts and float(puts[0].split()[-1]) >= 2  # the data file and the log entry, at least


#: Paths of cluster membership and the controller (heartbeats, the state table, the catalog): measured
#: and bounded by the cluster's own tests, not here.
_CLUSTER = ("_system/brokers", "_system/partition_state", "_system/topics")


def test_idle_broker_on_s3_sends_almost_no_requests(s3: S3Warehouse) -> None:
    """Issue 28: an idle topic costs <= 1 request per 10 s per broker once maintenance settled (cluster
    membership aside): the broker polls only for what other processes change, and seldom (the quota and
    offsets tables, the topics' history once a minute on object storage, not every 10 s)."""
    with _gateway(s3) as base:
        ready = time.monotonic()
        for topic in ("idle-a", "idle-b"):
            _cli(base, "topics", "create", topic, "--partitions", "2")
            _cli(base, "produce", topic, stdin="".join(f"v{i}\n" for i in range(5)))
        out = _cli(base, "consume", "idle-a", "--group", "g", "--from-beginning", "--max-messages", "5")
        assert len(out.split()) == 5
        time.sleep(10)  # maintenance's round after the last commits (due 5 s after them)
        if time.monotonic() - ready > 35:  # the window would meet the once-a-minute looks
            pytest.skip("setup too slow to leave a window before the broker's once-a-minute looks")
        s3.proxy.record(True)
        for _ in range(2):  # two rounds of the 10 s pollers and of the console's sampler
            assert "topiclake_partition_end_offset" in httpx.get(f"{base}/metrics").text  # from memory
            time.sleep(10)
        logged = s3.proxy.requests()
        s3.proxy.record(False)
    cluster = [r for r in logged if any(p in unquote(r[3]) for p in _CLUSTER)]
    assert cluster, "the proxy logged none of the cluster's heartbeats: it did not record"
    other = [
        f"{t:.1f} {op} {unquote(path)}" for t, op, _m, path in logged if (t, op, _m, path) not in cluster
    ]
    # 2 idle topics x 20 s; before: 6 (the quota table's LIST, the offsets table's LIST + GET every 10 s)
    assert len(other) <= 4, "\n".join(other)
