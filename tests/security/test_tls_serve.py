"""`topiclake serve --tls-cert --tls-key --tls-ca`: HTTPS and the Kafka listener over mTLS from the command
line (the clustered default, so the broker also reaches itself over https)."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient
from tls_harness import make_certs

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow


def test_serve_with_mtls_on_http_and_kafka(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "pki")
    cert, key = certs.client("alice")
    http, kafka = free_port(), free_port()  # never the same port twice
    cmd = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(tmp_path / "wh")]
    cmd += ["--port", str(http), "--kafka-port", str(kafka), "--log-level", "info"]
    cmd += [
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--tls-ca",
        str(certs.ca),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        ctx.load_cert_chain(str(cert), str(key))
        deadline = time.monotonic() + 40
        while True:
            try:
                if httpx.get(f"https://127.0.0.1:{http}/healthz", verify=ctx, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.2)
        created = httpx.post(
            f"https://127.0.0.1:{http}/v1/topics", json={"name": "t"}, verify=ctx, timeout=10
        )
        assert created.status_code in (200, 201)
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{kafka}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca),
                "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key),
            }
        )
        assert "t" in admin.list_topics(timeout=10).topics
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert f"on https://127.0.0.1:{http}" in output
    assert "SSL)" in output  # the Kafka listener's protocol in its start line
