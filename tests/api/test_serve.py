"""`topiclake serve` starts a real uvicorn server on 127.0.0.1 over a warehouse and stops cleanly."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from topiclake.process.ports import free_port


def test_serve_answers_health_readiness_and_openapi(tmp_path: Path) -> None:
    port = free_port()
    warehouse = tmp_path / "wh"
    env = {**os.environ, "TOPICLAKE_BROKER__BROKER_ID": "7"}
    registry_port = free_port()  # never Confluent's 8081: tests run side by side
    cmd = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(warehouse), "--port", str(port)]
    cmd += ["--schema-registry-port", str(registry_port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)
        ready = httpx.get(f"{base}/readyz").json()
        assert ready["status"] == "ready" and ready["broker_id"] == 7
        assert ready["warehouse"] == str(warehouse.resolve())
        spec = httpx.get(f"{base}/openapi.json").json()
        assert "/healthz" in spec["paths"]
        assert httpx.get(f"{base}/docs").status_code == 200
        assert (warehouse / "_system" / "topics" / "_delta_log").is_dir()
        # the schema registry listens on its own port from the same process, and is advertised
        assert httpx.get(f"http://127.0.0.1:{registry_port}/subjects").json() == []
        (meta,) = httpx.get(f"{base}/v1/metadata").json()["brokers"]
        assert meta["listeners"]["schema_registry"] == f"127.0.0.1:{registry_port}"
        # a keep-alive connection idle past uvicorn's 5 s default is still open (keep_alive_s, 65 s)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b'{"status":"ok"}'
            first = conn.sock
            time.sleep(5.5)
            conn.request("GET", "/healthz")  # RemoteDisconnected if the server closed it at 5 s
            assert conn.getresponse().read() == b'{"status":"ok"}'
            assert conn.sock is first
        finally:
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
    assert proc.returncode in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal after shutdown
    assert "broker 7 closed" in output


def test_cli_help_and_errors() -> None:
    out = subprocess.run([sys.executable, "-m", "topiclake.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "serve" in out.stdout and "Delta Lake" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", "ftp://nowhere/x", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0
    assert "unsupported warehouse URI scheme" in bad.stdout + bad.stderr


def test_serve_with_a_busy_schema_registry_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        cmd = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(tmp_path / "wh")]
        cmd += ["--port", str(free_port()), "--schema-registry-port", str(taken)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"InvalidConfig: cannot listen on 127.0.0.1:{taken} for the schema registry" in out.stderr
