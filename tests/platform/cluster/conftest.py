"""Fixtures of the cluster tests: the warehouse the brokers share, a local directory or an S3 bucket.

A test that takes ``warehouse`` runs twice: over a local directory and over S3 (the project's local S3 API
server, one per test session and worker, stopped by its pid; a bucket and a counting proxy per test). The
S3 runs share one xdist group, so that one worker runs them one after another: two clusters of broker
processes over one request-at-a-time S3 server at once would measure the machine, not the cluster.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_procs import Warehouse

from topiclake.objectstore import LocalS3Server

_buckets = itertools.count()


@pytest.fixture(scope="session")
def cluster_s3_server() -> Iterator[LocalS3Server]:
    server = LocalS3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(
    params=["local", pytest.param("s3", marks=pytest.mark.xdist_group("cluster-s3"))],
)
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    """The shared warehouse: ``tmp_path/wh``, or a fresh bucket behind its own proxy."""
    if request.param == "local":
        yield Warehouse.local(tmp_path / "wh")
        return
    server: LocalS3Server = request.getfixturevalue("cluster_s3_server")
    wh = Warehouse.s3(server, f"cluster-{next(_buckets)}")
    try:
        yield wh
    finally:
        wh.close()
