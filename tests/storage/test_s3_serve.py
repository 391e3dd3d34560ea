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


#: Seconds between maintenance's idle rounds and between the console's history scans in the idle test (a
#: minute each by default), and the length of its window: shorter, so that it holds at most one of each.
IDLE_LOOK_S = 25
WINDOW_S = 20
#: Paths of cluster membership and the controller (heartbeats, the state table, the catalog): measured
#: and bounded by the cluster's own tests, not here.
_CLUSTER = ("_system/brokers", "_system/partition_state", "_system/topics")


def test_idle_broker_on_s3_sends_almost_no_requests(s3: S3Warehouse) -> None:
    """Issue 28: an idle topic costs <= 1 request per 10 s per broker once maintenance settled (cluster
    membership aside): the broker polls only for what other processes change, and seldom; an idle table's
    maintainer opens no delta-rs handle (its partitions' ends were recorded after the last change, no
    tombstone came of age). bench/s3_idle.py measures a whole minute: 0.33 per 10 s per idle topic.

    The two looks an idle topic still costs, maintenance's idle round and the console's scan of its
    history (a minute apart each by default), come every :data:`IDLE_LOOK_S` here, so that the test need
    not wait minutes: the window (shorter than that) holds at most one of each per topic, and the bound of 3
    requests per topic in it is <= 0.5 per 10 s at the default minute."""
    # the partitions' ends are recorded 5 s after a change (default: a minute): a handle opened for them
    # every 5 s would show in the window
    env = {
        "TOPICLAKE_BROKER__OFFSETS_HISTORY_MS": "5000",
        "TOPICLAKE_BROKER__OBJECT_IDLE_ROUND_MS": str(IDLE_LOOK_S * 1000),
        "TOPICLAKE_CONSOLE_OBJECT_SCAN_MS": str(IDLE_LOOK_S * 1000),
    }
    with _gateway(s3, **env) as base:
        ready = time.monotonic()
        for topic in ("idle-a", "idle-b"):
            _cli(base, "topics", "create", topic, "--partitions", "2")
            _cli(base, "produce", topic, stdin="".join(f"v{i}\n" for i in range(5)))
        produced = time.monotonic()
        out = _cli(base, "consume", "idle-a", "--group", "g", "--from-beginning", "--max-messages", "5")
        assert len(out.split()) == 5
        # settled: the round 5 s after the topics' last change, then an idle round (which records the
        # partitions' ends if that one did not), and the console's first scan of each topic
        settled = max(produced + 5 + IDLE_LOOK_S + 3, ready + IDLE_LOOK_S + 4)
        time.sleep(max(0.0, settled - time.monotonic()))
        s3.proxy.record(True)
        for _ in range(WINDOW_S // 10):  # rounds of the 10 s pollers and of the console's sampler
            assert "topiclake_partition_end_offset" in httpx.get(f"{base}/metrics").text  # from memory
            time.sleep(10)
        logged = s3.proxy.requests()
        s3.proxy.record(False)
    cluster = [r for r in logged if any(p in unquote(r[3]) for p in _CLUSTER)]
    assert cluster, "the proxy logged none of the cluster's heartbeats: it did not record"
    other = [(op, unquote(path)) for _t, op, _m, path in logged if (_t, op, _m, path) not in cluster]
    shown = "\n".join(f"{op} {path}" for op, path in other)
    for topic in ("idle-a", "idle-b"):
        mine = [r for r in other if f"/topics/{topic}/" in r[1] or f"prefix=wh/topics/{topic}/" in r[1]]
        assert len(mine) <= 3, shown  # an idle round (measured: a LIST and a GET) and a console scan
        assert not [r for r in mine if r[1].endswith(".json") or "checkpoint.parquet" in r[1]], shown
    # the broker's own, whatever its topics: the quota and offsets tables' looks, a minute apart each
    base_cost = [r for r in other if "/topics/" not in r[1] and "prefix=wh/topics/" not in r[1]]
    assert len(base_cost) <= 3, shown
