"""A warehouse on S3 that cannot be used gets one clear line and exit 1, never a traceback (issue 29, item 5).

Each entry point is run as a user runs it (``topiclake serve``, ``topiclake jobs``, the job's module) against
the project's local S3 API server and its proxy: an endpoint that is not a URL (a Rust panic in delta-rs
before), a bucket that does not exist (a traceback under "Application startup failed" and exit 3 before),
credentials the store refuses (403), and an endpoint where nothing listens.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from s3_harness import S3Warehouse

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow


def _run(args: list[str], options: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TOPICLAKE_"))}
    env.update(options)
    env["TOPICLAKE_SCHEMA_REGISTRY_PORT"] = "0"
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _serve(uri: str, options: dict[str, str]) -> subprocess.CompletedProcess[str]:
    port = free_port()
    return _run(
        ["-m", "topiclake.cli", "serve", "--warehouse", uri, "--port", str(port), "--kafka-port", "0"],
        options,
    )


def _one_line(out: subprocess.CompletedProcess[str], *words: str) -> str:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "panicked" not in text and "Application startup failed" not in text, (
        text
    )
    lines = [line for line in out.stderr.splitlines() if line.startswith("StorageError: ")]
    assert len(lines) == 1, text
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_an_endpoint_that_is_not_a_url(s3: S3Warehouse) -> None:
    options = {**s3.options, "AWS_ENDPOINT_URL": "not a url"}
    _one_line(_serve(s3.uri, options), "not an http(s) URL", "AWS_ENDPOINT_URL")
    _one_line(_run(["-m", "topiclake.jobs.compact", "--warehouse", s3.uri, "--topic", "t"], options))


def test_a_bucket_that_does_not_exist(s3: S3Warehouse) -> None:
    uri = "s3://no-such-bucket/wh"
    _one_line(_serve(uri, s3.options), "'no-such-bucket' does not exist")
    cli = ["-m", "topiclake.cli", "jobs", "retention", "--warehouse", uri, "--topic", "t"]
    _one_line(_run(cli, s3.options), "does not exist")


def test_credentials_the_store_refuses(s3: S3Warehouse) -> None:
    s3.proxy.inject_errors(1, status=403, code="InvalidAccessKeyId")
    _one_line(_serve(s3.uri, s3.options), "refused access", "AWS_ACCESS_KEY_ID")


def test_an_endpoint_where_nothing_listens(s3: S3Warehouse) -> None:
    options = {**s3.options, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    _one_line(_serve(s3.uri, options), "cannot reach the object store")


def test_the_local_s3_server_starts_cleanly_as_documented() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "topiclake.objectstore.devserver", "--port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("listening on http://127.0.0.1:")
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "RuntimeWarning" not in err, err
