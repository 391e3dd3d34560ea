"""The real ``topiclake`` CLI (a subprocess) with ``--bootstrap-server`` against real brokers, and
``topiclake cluster describe``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from broker_harness import BrokerProcess

from topiclake.process.ports import free_port


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (``module_broker``): each test has topics of its own."""
    return module_broker


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``topiclake ARGS`` with TOPICLAKE_URL pointing at nothing (so only a bootstrap server can answer)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TOPICLAKE_")}
    return subprocess.run(
        [sys.executable, "-m", "topiclake.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "TOPICLAKE_URL": f"http://127.0.0.1:{free_port()}", **(env or {})},
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


def test_client_commands_take_a_bootstrap_server(broker: BrokerProcess) -> None:
    servers = f"127.0.0.1:{free_port()},{broker.address}"  # the first one is dead
    ok(run("topics", "create", "orders", "--partitions", "3", "--bootstrap-server", servers))
    env = {"TOPICLAKE_BOOTSTRAP_SERVER": servers}
    assert "orders" in ok(run("topics", "list", env=env)).split()
    lines = "".join(f"k{i}\tv{i}\n" for i in range(30))
    proc = run("produce", "orders", "-K", "\\t", stdin=lines, env=env)
    ok(proc)
    assert "produced 30 records" in proc.stderr
    out = ok(
        run("consume", "orders", "--from-beginning", "--max-messages", "30", "--format", "%k=%v\\n", env=env)
    )
    assert sorted(out.split()) == sorted(f"k{i}=v{i}" for i in range(30))
    ok(run("consume", "orders", "--group", "g1", "--from-beginning", "--max-messages", "30", env=env))
    assert "g1" in ok(run("groups", "list", env=env))
    # without a bootstrap server the (dead) --url is used, as before
    proc = run("topics", "list")
    assert proc.returncode == 1 and "GatewayUnavailable" in proc.stderr


def test_produce_idempotent_over_a_url(broker: BrokerProcess) -> None:
    env = {"TOPICLAKE_URL": broker.url}
    ok(run("topics", "create", "idem", "--partitions", "2", env=env))
    proc = run("produce", "idem", "--idempotent", stdin="a\nb\nc\n", env=env)
    ok(proc)
    assert "produced 3 records" in proc.stderr
    proc = run("produce", "idem", "--idempotent", "--acks", "1", stdin="a\n", env=env)
    assert proc.returncode == 1 and "needs acks=all" in proc.stderr


def test_cluster_describe(broker: BrokerProcess) -> None:
    env = {"TOPICLAKE_BOOTSTRAP_SERVER": broker.address}
    ok(run("topics", "create", "t3", "--partitions", "3", env=env))
    doc = json.loads(ok(run("cluster", "describe", "--json", env=env)))
    assert doc["controller_id"] == 1
    (b,) = doc["brokers"]
    partitions = sum(t["partitions"] for t in doc["topics"])  # the module's other tests' topics too
    assert (b["id"], b["address"], b["controller"]) == (1, broker.address, True)
    assert b["leader_count"] == partitions
    (t,) = (t for t in doc["topics"] if t["name"] == "t3")
    assert (t["name"], t["partitions"], t["replication_factor"], t["leaders"]) == ("t3", 3, 1, {"1": 3})
    assert t["under_replicated"] == [] and t["offline"] == []
    text = ok(run("cluster", "describe", "--partitions", env=env))
    assert "controller 1" in text and broker.address in text and "t3" in text
    text = ok(run("cluster", "describe", "--url", broker.url))
    assert "1 broker(s)" in text
