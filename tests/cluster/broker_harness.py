"""Harness of the cluster tests: real ``topiclake serve`` brokers in subprocesses on 127.0.0.1.

Imported by name (``from broker_harness import ...``): pytest puts this folder on the import path for the
tests in it, and the name is unique in the test tree. Every broker is stopped by its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from topiclake.process.ports import free_port

#: ``@pytest.mark.parametrize("store", STORES, indirect=True)``: a test over a directory and over S3 (the
#: S3 runs in one xdist group: one worker runs them one after another, see conftest.py).
STORES = ["local", pytest.param("s3", marks=pytest.mark.xdist_group("cluster-s3"))]


class BrokerProcess:
    """``topiclake serve --broker-id N`` over ``warehouse`` on a free port of 127.0.0.1.

    Args:
        warehouse: The shared warehouse: a directory, or an ``s3://`` URI.
        broker_id: The broker's id.
        log: File the broker's output goes to.
        port: Port to listen on (default: a free one).
        extra: More ``serve`` arguments.
        env: More environment (``AWS_*`` for an S3 warehouse); also the storage options of this process's
            own reads of the warehouse (:attr:`options`).
    """

    def __init__(
        self,
        warehouse: Path | str,
        broker_id: int,
        log: Path,
        *,
        port: int | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.env = dict(env or {})
        self.broker_id = broker_id
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = f"127.0.0.1:{self.port}"
        self.log = log
        self.cmd = [
            sys.executable,
            "-m",
            "topiclake.cli",
            "serve",
            "--warehouse",
            str(warehouse),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--broker-id",
            str(broker_id),
            "--log-level",
            "warning",
            *(extra or []),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: float = 60.0) -> BrokerProcess:
        """Start the broker and return once it answers ``/healthz``."""
        out = self.log.open("ab")
        env = {**os.environ, "TOPICLAKE_BROKER__LINGER_MS": "1", **self.env}
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        deadline = time.monotonic() + wait
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker {self.broker_id} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def options(self) -> dict[str, str] | None:
        """Storage options to read the warehouse from this process (None for a directory)."""
        return self.env or None

    def table_uri(self, topic: str) -> str:
        """The URI of a topic's Delta table."""
        return f"{str(self.warehouse).rstrip('/')}/topics/{topic}"

    @property
    def alive(self) -> bool:
        """The process is running."""
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """``kill -9`` the broker (by pid) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM by pid (the broker commits what is pending), SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def bootstrap(brokers: list[BrokerProcess]) -> str:
    """The ``host:port,...`` bootstrap list of ``brokers``."""
    return ",".join(b.address for b in brokers)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``predicate()`` until true, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
