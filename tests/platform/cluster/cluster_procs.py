"""Real broker processes (``topiclake serve``) over one warehouse, on free 127.0.0.1 ports.

The warehouse is a local directory or an S3 bucket (:class:`Warehouse`): the project's local S3 API server
behind a counting proxy of its own, the brokers configured by AWS's usual variables only. Imported by name
from the tests in this folder. Every process is stopped by its pid when the test ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.platform import Storage
from topiclake.process.ports import free_port

#: Shorter than the defaults so failover tests take seconds; the benchmark measures the defaults.
FAST_ENV = {
    "TOPICLAKE_BROKER__HEARTBEAT_INTERVAL_MS": "250",
    "TOPICLAKE_BROKER__SESSION_TIMEOUT_MS": "2500",
    "TOPICLAKE_BROKER__LEADER_REBALANCE_DELAY_MS": "1000",
    "TOPICLAKE_BROKER__LINGER_MS": "1",
}


@dataclass
class Warehouse:
    """Where the brokers of a test keep everything: ``uri`` with ``env`` for the brokers and ``options``
    for this process's own reads; ``proxy`` counts an S3 warehouse's requests (and can slow it down)."""

    uri: str
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] | None = None
    proxy: ProxyProcess | None = None

    def topic_uri(self, topic: str) -> str:
        return Storage(self.uri, self.options).topic_uri(topic)

    @staticmethod
    def local(path: Path) -> Warehouse:
        return Warehouse(str(path))

    @staticmethod
    def s3(server: LocalS3Server, bucket: str) -> Warehouse:
        """A fresh bucket of ``server`` reached through a new proxy (stop it with :meth:`close`)."""
        server.create_bucket(bucket)
        proxy = ProxyProcess(server.endpoint).start()
        env = {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }
        return Warehouse(f"s3://{bucket}/wh", env, dict(env), proxy)

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()


@dataclass
class BrokerProc:
    broker_id: int
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Cluster:
    warehouse: Path | Warehouse
    logs: Path
    env: dict[str, str] = field(default_factory=lambda: dict(FAST_ENV))
    brokers: dict[int, BrokerProc] = field(default_factory=dict)
    prefix: list[str] = field(default_factory=list)  # e.g. an unshare wrapper

    def __post_init__(self) -> None:
        if isinstance(self.warehouse, Warehouse):
            self.env = {**self.env, **self.warehouse.env}

    @property
    def uri(self) -> str:
        return self.warehouse.uri if isinstance(self.warehouse, Warehouse) else str(self.warehouse)

    def start(self, broker_id: int, port: int | None = None, wait: bool = True) -> BrokerProc:
        port = port or free_port()
        log = self.logs / f"broker-{broker_id}-{int(time.time() * 1000)}.log"
        exe = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", self.uri]
        cmd = [*self.prefix, *exe, "--port", str(port), "--broker-id", str(broker_id)]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env={**os.environ, **self.env}, stdout=fh, stderr=subprocess.STDOUT)
        bp = BrokerProc(broker_id, port, proc, log)
        self.brokers[broker_id] = bp
        if wait:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{bp.url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert bp.alive(), log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"broker {broker_id} did not start"
                time.sleep(0.1)
        return bp

    def kill9(self, broker_id: int) -> None:
        bp = self.brokers[broker_id]
        os.kill(bp.proc.pid, signal.SIGKILL)
        bp.proc.wait(10)

    def stop_all(self) -> None:
        for bp in self.brokers.values():
            if bp.alive():
                bp.proc.send_signal(signal.SIGTERM)
        for bp in self.brokers.values():
            try:
                bp.proc.wait(20)
            except subprocess.TimeoutExpired:
                bp.proc.kill()
                bp.proc.wait(10)

    def live(self) -> list[BrokerProc]:
        return [b for b in self.brokers.values() if b.alive()]

    def metadata(self, via: int | None = None) -> dict[str, Any]:
        bp = self.brokers[via] if via is not None else self.live()[0]
        doc: dict[str, Any] = httpx.get(f"{bp.url}/v1/metadata", timeout=10).json()
        return doc

    def leaders(self, topic: str, via: int | None = None) -> dict[int, int]:
        for t in self.metadata(via)["topics"]:
            if t["name"] == topic:
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        return {}


def until(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> float:
    started = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what} not reached within {timeout_s} s")
        time.sleep(0.1)
