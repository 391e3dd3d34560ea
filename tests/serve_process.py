"""``topiclake serve`` as a subprocess, as users run it: started, waited for, stopped by SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

from topiclake.process.ports import free_port


@dataclass
class Served:
    """A running ``topiclake serve``: its URL, its process and (once stopped) everything it printed."""

    url: str
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)


@contextmanager
def serving(
    warehouse: str, env: dict[str, str], args: Sequence[str] = (), timeout: float = 60
) -> Iterator[Served]:
    """Run ``topiclake serve --warehouse W --port <free>`` with ``env`` (the schema registry and Kafka
    listeners off unless it or ``args`` turn them on); yield once /readyz answers; SIGTERM it after, its
    output in :attr:`Served.output`."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "topiclake.cli",
        "serve",
        "--warehouse",
        warehouse,
        "--port",
        str(port),
        *args,
    ]
    # never the well-known ports of a developer's own services or of another test's broker (tests/conftest.py)
    env = {"TOPICLAKE_SCHEMA_REGISTRY_PORT": "0", "TOPICLAKE_KAFKA_PORT": "0", **env}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    served = Served(f"http://127.0.0.1:{port}", proc)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{served.url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        served.output.append(output)
