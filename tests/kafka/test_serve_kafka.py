"""`topiclake serve --kafka-port`: the Kafka listener starts with the gateway; a taken port is an error."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow


def _serve(tmp_path: Path, http: int, kafka: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(tmp_path / "wh")]
    cmd += ["--port", str(http), "--kafka-port", str(kafka), "--log-level", "info"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_serve_speaks_kafka_and_http_on_one_broker(tmp_path: Path) -> None:
    http, kafka = free_port(), free_port()  # never the same port twice
    proc = _serve(tmp_path, http, kafka)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{http}/v1/topics", json={"name": "t"}).status_code in (200, 201)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{kafka}", "acks": "all"})
        p.produce("t", key=b"k", value=b"from kafka")
        assert p.flush(20) == 0
        c = Consumer(
            {"bootstrap.servers": f"127.0.0.1:{kafka}", "group.id": "s", "auto.offset.reset": "earliest"}
        )
        try:
            c.subscribe(["t"])
            msg = None
            for _ in range(100):
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    break
            assert msg is not None and msg.value() == b"from kafka"
        finally:
            c.close()
        # serve's allocator: Arrow's pool is jemalloc, which gives freed pages back (process/memory.py)
        metrics = httpx.get(f"http://127.0.0.1:{http}/metrics", timeout=10).text
        assert 'topiclake_arrow_allocated_bytes{pool="jemalloc"}' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
    assert "kafka listener of broker 0 on 127.0.0.1" in output


def test_a_taken_kafka_port_stops_serve_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(tmp_path, free_port(), port)
        try:
            output, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0
    assert f"Kafka port 127.0.0.1:{port} is already in use" in output
