"""One local Spark session with Delta for every test under tests/spark, and a fresh warehouse per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from topiclake.jobs.session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/spark with ``spark``."""
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one session of the test run: ``local[2]``, Delta from the jar cache, no progress bars."""
    session = get_spark(
        "local[2]",
        "topiclake-tests",
        conf={
            "spark.ui.showConsoleProgress": "false",
            # keep Spark's own catalog directory out of the working tree
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
            # Tests VACUUM with RETAIN 0 HOURS to prove delta-rs copes with a fully vacuumed table.
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    """A fresh, empty warehouse directory for one test."""
    root = tmp_path / "wh"
    root.mkdir()
    return str(root)
