"""What the benchmark scripts share: percentiles, the machine they ran on, a gateway in a subprocess.

The scripts run as files (``python bench/<name>.py``), so this folder is on their import path and they
import this module by name.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import deltalake
import httpx
import pyarrow as pa

from topiclake.process.ports import free_port


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def machine(**extra: str) -> dict[str, str]:
    """Date, cores and versions of this run, plus the script's own ``extra`` facts."""
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(nproc),
        "python": platform.python_version(),
        "deltalake": deltalake.__version__,
        "pyarrow": pa.__version__,
        "platform": platform.platform(),
        **extra,
    }


def run_threads(count: int, client: Callable[[int], None], barrier: threading.Barrier) -> float:
    """Run ``client(i)`` in ``count`` threads that all wait on ``barrier`` (made for ``count + 1``) before
    they start; return the seconds from the start to the last thread's end."""
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def wait_port(port: int, timeout_s: float) -> None:
    """Until something listens on 127.0.0.1:``port`` (raises the last OSError after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until ``url``/healthz answers 200; False if the process exits or time runs out first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)


class GatewayProcess:
    """``topiclake serve`` in a subprocess on 127.0.0.1 over ``warehouse``; output goes to ``log``;
    ``env`` adds settings (``TOPICLAKE_*``), ``args`` more ``serve`` options (``--broker-id``); ``port``
    default: a free one; ``kafka_port`` turns the Kafka listener on; ``launcher`` runs another entry point
    (bench/_probe_serve.py)."""

    def __init__(
        self,
        warehouse: Path,
        log: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        port: int | None = None,
        kafka_port: int = 0,
        launcher: tuple[str, ...] = ("-m", "topiclake.cli"),
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, *launcher, "serve", "--warehouse", str(warehouse)]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        cmd += ["--kafka-port", str(kafka_port)]  # 0: no Kafka listener (never 9092 by accident)
        cmd += ["--schema-registry-port", "0", *args]  # never Confluent's 8081: runs side by side with tests
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            cmd, stdout=self._out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        if not wait_healthy(self.url, self.proc, 60):
            self.stop()
            raise RuntimeError(f"gateway did not start; see {log}:\n{log.read_text()[-2000:]}")

    def rss_mb(self) -> float | None:
        """VmRSS of the gateway process, in MiB."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def kill9(self) -> None:
        """``kill -9`` the gateway (by pid) and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if not self._out.closed:
            self._out.close()

    def stop(self) -> None:
        """SIGTERM (the gateway commits what is pending), SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not self._out.closed:
            self._out.close()
