"""The units pytest-xdist deals out (tests/xdist_units.py): the Spark session's tests stay on one worker,
tests with Spark JVMs of their own leave that unit, and the longest units are dealt first."""

from __future__ import annotations

import ast
from pathlib import Path

from xdist_units import (
    JOBS_SESSION,
    OWN_JVM,
    OWN_JVM_TESTS,
    SECONDS_PER_TEST,
    UNIT_SECONDS,
    longest_first,
    work_unit,
)

ROOT = Path(__file__).resolve().parent.parent


def _tests_asking_for(path: str, fixture: str) -> set[str]:
    """Node ids of the test functions in ``path`` that take ``fixture`` as an argument."""
    tree = ast.parse((ROOT / path).read_text())
    return {
        f"{path}::{node.name}"
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and any(arg.arg == fixture for arg in node.args.args)
    }


def test_tests_with_their_own_jvm_never_use_the_session() -> None:
    # one of them asking for the session would start a second session JVM on another worker
    for path in OWN_JVM:
        assert (ROOT / path).is_file(), path
        assert _tests_asking_for(path, "spark") == set(), path
    for nodeid in OWN_JVM_TESTS:
        path, name = nodeid.split("::")
        assert f"{path}::{name}" not in _tests_asking_for(path, "spark")
        assert name in {n.split("::")[1] for n in _tests_asking_for(path, "broker")}  # it exists


def test_the_second_session_unit_holds_session_files() -> None:
    # a file named there that moved or started a JVM of its own would quietly fall back to ``spark``
    for path in JOBS_SESSION:
        assert path.startswith("tests/spark/") and (ROOT / path).is_file(), path
        assert path not in OWN_JVM
        assert _tests_asking_for(path, "spark"), path


def test_units() -> None:
    assert work_unit("tests/spark/test_sql.py::test_x[a]") == "spark"
    assert work_unit("tests/spark/test_cli_sql.py::test_formats_statements_and_errors") == "spark"
    assert work_unit("tests/spark/test_jobs_concurrency.py::test_x[s3]") == "spark-jobs"
    own = "tests/spark/test_cli_sql.py::test_persistent_catalog_is_seen_by_a_second_jvm"
    assert work_unit(own) == own
    assert (
        work_unit("tests/spark/test_cluster.py::test_stop_releases_the_cluster")
        == "tests/spark/test_cluster.py"
    )
    assert (
        work_unit("tests/kafka/test_spark.py::test_spark_kafka_source_and_sink")
        == "tests/kafka/test_spark.py"
    )
    assert work_unit("tests/api/test_cli.py::test_a[b::c]") == "tests/api/test_cli.py"


def test_longest_units_are_dealt_first() -> None:
    known = min(UNIT_SECONDS, key=lambda u: UNIT_SECONDS[u])  # a unit measured at >= ~15 s, of 1 test here
    assert UNIT_SECONDS[known] > SECONDS_PER_TEST * 20
    # unknown units go by their number of tests, known ones by their measured length
    order = longest_first([("tests/few.py", 2), ("tests/many.py", 20), (known, 1), ("spark", 1)])
    assert order == ["spark", known, "tests/many.py", "tests/few.py"]
