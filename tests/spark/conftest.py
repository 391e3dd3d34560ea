"""One local Spark session with Delta for every test under tests/spark, and a fresh warehouse per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from topiclake.jobs.session import get_spark
from topiclake.objectstore import LocalS3Server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_HERE = Path(__file__).parent
#: the variables through which tests/conftest.py gives short-lived Spark JVMs their options
_SHORT_JVM_OPTS = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS")
_buckets = itertools.count()
#: bytecode verification off (tests/conftest.py's NO_VERIFY; not imported: conftest modules are not)
_NO_VERIFY = "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/spark with ``spark``."""
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one session of the test run: ``local[2]``, Delta from the jar cache, no progress bars.

    Its JVM keeps Java's default compilers and collector: tests/conftest.py gives every Spark JVM the
    C1 compiler alone and the serial collector, which suits JVMs that live a minute, but this one runs a
    whole unit's jobs for ten minutes and more (with them, a compact-keys job beside a live producer
    took 179 s under load where it took 40, and once did not finish in 600 s). It only loads classes
    without bytecode verification, as those JVMs do: every query's generated classes are loaded too.
    """
    saved = {name: os.environ.pop(name) for name in _SHORT_JVM_OPTS if name in os.environ}
    try:
        session = _session(tmp_path_factory)
    finally:
        os.environ.update(saved)
    yield session
    session.stop()


def _session(tmp_path_factory: pytest.TempPathFactory) -> SparkSession:
    return get_spark(
        "local[2]",
        "topiclake-tests",
        conf={
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": _NO_VERIFY,
            # keep Spark's own catalog directory out of the working tree
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
            # Tests VACUUM with RETAIN 0 HOURS to prove delta-rs copes with a fully vacuumed table.
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        },
    )


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    """A fresh, empty warehouse directory for one test."""
    root = tmp_path / "wh"
    root.mkdir()
    return str(root)


@pytest.fixture(scope="session")
def s3_lake() -> Iterator[LocalS3Server]:
    """The local S3 server (moto's, each request atomic per key) for the Spark tests on S3, started once."""
    server = LocalS3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_warehouse(s3_lake: LocalS3Server) -> tuple[str, dict[str, str]]:
    """A warehouse in a fresh bucket of the local S3 server, and its storage options."""
    bucket = f"spark-{next(_buckets)}"
    s3_lake.create_bucket(bucket)
    options = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_lake.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    return f"s3://{bucket}/wh", options
