"""The object-storage tests' harness: a real S3 API server on 127.0.0.1, and a proxy in front of it.

The server (``topiclake.objectstore.devserver``: moto's S3 API, each request atomic per key so conditional
writes are atomic as on S3) runs once per test session as a subprocess, stopped by its pid. Each test gets
a bucket of its own and a counting, fault-injecting proxy (``topiclake.objectstore.ProxyProcess``, a
process of its own); the warehouse's endpoint is the proxy, so a test can count requests or make the store
slow, failing or gone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from topiclake.objectstore import LocalS3Server, ProxyProcess

_buckets = itertools.count()


@dataclass
class S3Warehouse:
    """One test's bucket, reached through its proxy."""

    uri: str
    options: dict[str, str]
    proxy: ProxyProcess
    server: LocalS3Server
    kind: str = "s3"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    server = LocalS3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: LocalS3Server) -> Iterator[S3Warehouse]:
    bucket = f"lake-{next(_buckets)}"
    s3_server.create_bucket(bucket)
    proxy = ProxyProcess(s3_server.endpoint).start()
    options = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": proxy.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    try:
        yield S3Warehouse(f"s3://{bucket}/wh", options, proxy, s3_server)
    finally:
        proxy.stop()
