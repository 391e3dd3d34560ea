"""Fixtures of the cluster tests: brokers in subprocesses, always stopped by pid.

A test parametrized with ``store`` (indirectly, with ``broker_harness.STORES``) runs its brokers over a
local directory and over S3: the project's local S3 API server (one per test session and worker, stopped by
its pid), a bucket and a counting proxy per test, the brokers configured by AWS's usual variables only.
Like any test file, each is one xdist unit (tests/xdist_units.py), so a worker's S3 server serves one file's
tests at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_harness import BrokerProcess

from topiclake.objectstore import LocalS3Server, ProxyProcess

_buckets = itertools.count()


@pytest.fixture(scope="session")
def cluster_s3_server() -> Iterator[LocalS3Server]:
    server = LocalS3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """``local`` unless the test is parametrized with ``STORES``."""
    return str(getattr(request, "param", "local"))


@pytest.fixture
def shared_warehouse(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Path | str, dict[str, str]]]:
    """The brokers' warehouse and the environment that reaches it: ``tmp_path / "wh"`` and none, or (with
    ``store`` s3) a fresh bucket behind a proxy of its own on the session's S3 server and AWS's usual
    variables (also the storage options of the test's own reads)."""
    if store != "s3":
        yield tmp_path / "wh", {}
        return
    server: LocalS3Server = request.getfixturevalue("cluster_s3_server")
    bucket = f"brokers-{next(_buckets)}"
    server.create_bucket(bucket)
    proxy: ProxyProcess = ProxyProcess(server.endpoint).start()
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": proxy.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    try:
        yield f"s3://{bucket}/wh", env
    finally:
        proxy.stop()


@pytest.fixture
def start_brokers(
    tmp_path: Path, shared_warehouse: tuple[Path | str, dict[str, str]]
) -> Iterator[Callable[..., list[BrokerProcess]]]:
    """``start_brokers(n)``: n brokers (ids 1..n) over one warehouse; each is stopped after the test."""
    started: list[BrokerProcess] = []
    warehouse, env = shared_warehouse

    def start(count: int, *, first_id: int = 1, extra: list[str] | None = None) -> list[BrokerProcess]:
        new = [
            BrokerProcess(warehouse, i, tmp_path / f"broker-{i}.log", extra=extra, env=env)
            for i in range(first_id, first_id + count)
        ]
        started.extend(new)
        for b in new:
            b.start()
        return new

    try:
        yield start
    finally:
        for b in started:
            b.stop()


@pytest.fixture
def broker(start_brokers: Callable[..., list[BrokerProcess]]) -> BrokerProcess:
    """One broker (id 1): today's one-broker cluster."""
    return start_brokers(1)[0]


@pytest.fixture(scope="module")
def module_broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[BrokerProcess]:
    """One broker (id 1) over a directory, shared by the tests of one module that each use topics (and
    clients) of their own: one start (~1.5 CPU-s) for them all; stopped by pid after the module. Tests that
    stop or kill their broker start their own (``start_brokers``)."""
    root = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    started = BrokerProcess(root / "wh", 1, root / "broker-1.log").start()
    try:
        yield started
    finally:
        started.stop()
