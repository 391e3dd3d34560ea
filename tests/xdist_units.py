"""How pytest-xdist deals the suite out to its workers: units of work, and the order they are dealt in.

Imported by name from tests/conftest.py (like tests/serve_process.py). See that module's docstring.

A unit is a whole test file, except that the tests which use the in-process Spark session (tests/spark)
are two units, ``spark`` (the data source, sink, SQL and interop) and ``spark-jobs`` (the Spark jobs and
the S3 tests, :data:`JOBS_SESSION`): each is held by one worker with one session, and the two run side
by side (the session's tests alone were longer than a third of the suite: on three workers they were
its critical path). Tests that start Spark JVMs
of their own (spark-submit to a standalone cluster, a pipeline or job process killed with SIGKILL, the
``topiclake sql`` command and a notebook JVM, Spark's Kafka connector) never touch that session: each of
their files is a unit of its own, so they run beside the session on another worker instead of after it.

Units are dealt longest first (longest-processing-time scheduling): a long unit dealt last would leave the
other workers idle until it ends. The length of a unit is what :data:`UNIT_SECONDS` says it took in a
full run (``--durations=0``), else a guess from its number of tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Tests outside tests/spark that use the in-process Spark session.
SESSION_ELSEWHERE: frozenset[str] = frozenset()

#: Files under tests/spark whose tests use the session in the unit ``spark-jobs`` (a second session, on
#: another worker), not ``spark``.
JOBS_SESSION = frozenset(
    {
        "tests/spark/test_jobs_cli.py",
        "tests/spark/test_jobs_compact.py",
        "tests/spark/test_jobs_compact_keys.py",
        "tests/spark/test_jobs_concurrency.py",
        "tests/spark/test_jobs_reprocess.py",
        "tests/spark/test_jobs_retention.py",
        "tests/spark/test_jobs_vacuum.py",
        "tests/spark/test_s3_source_sink.py",
        "tests/spark/test_s3a_delta.py",
    }
)

#: Files under tests/spark whose tests start Spark JVMs of their own (not the session): own units.
OWN_JVM = frozenset(
    {
        "tests/spark/test_cluster.py",
        "tests/spark/test_pipeline_crash.py",
        "tests/spark/test_jobs_kill9.py",
    }
)

#: Tests under tests/spark, in a file that otherwise uses the session, that start a JVM of their own.
OWN_JVM_TESTS = frozenset({"tests/spark/test_cli_sql.py::test_persistent_catalog_is_seen_by_a_second_jvm"})

#: Seconds a unit took (setup, call and teardown of all its tests) in a full run on 3 workers, units of
#: 25 s or more: the clean-clone run of 2026-11-27 15:32 UTC (956 s, 1,035 tests, beside another engineer's
#: benchmarks; the units' seconds add up to 2,796 over 3 workers). Only their order counts. Refresh from a
#: ``--durations=0`` run when the order looks wrong.
UNIT_SECONDS: Mapping[str, float] = {
    "spark": 478,
    "spark-jobs": 323,
    "tests/spark/test_cluster.py": 105,  # 153 with two spark-submits (one since the fifth round: -33 % CPU)
    "tests/storage/test_s3_serve.py": 111,  # 149 with the idle test's 98 s (60 s since the fourth round)
    "tests/cluster/test_kafka_failover.py": 110,
    "tests/spark/test_pipeline_crash.py": 110,
    "tests/spark/test_cli_sql.py::test_persistent_catalog_is_seen_by_a_second_jvm": 88,
    "tests/platform/cluster/test_failover.py": 74,
    "tests/spark/test_jobs_kill9.py": 62,  # 70 with a third kill (at 4 s: the fifth round dropped it)
    "tests/cluster/test_multi_broker.py": 68,
    "tests/kafka/test_java_transactions.py": 61,
    "tests/api/test_cli_groups.py": 56,
    "tests/cluster/test_client_bootstrap.py": 25,  # 54 with a broker per test (alone: 58 -> 24 s)
    "tests/test_http_wrk_smoke.py": 47,
    "tests/cluster/test_kafka_transactions.py": 71,  # 46 before its [s3] copier case ran by default (+~25 s)
    "tests/test_sustained_smoke.py": 46,
    "tests/api/test_cli.py": 45,
    "tests/process/test_exit_codes.py": 42,
    "tests/security/test_fuzz_api.py": 40,
    "tests/platform/log/test_maintenance.py": 36,
    "tests/test_cluster_bench_smoke.py": 23,  # 32 with a 2-broker cluster too (the sixth round dropped it)
    "tests/storage/test_producers_after_cleanup.py": 29,
    "tests/platform/cluster/test_group_failover.py": 28,
    "tests/kafka/test_spark.py": 27,
    "tests/cluster/test_cli_cluster.py": 22,  # 27 with a broker per test
    "tests/kafka/test_consumer_protocol.py": 26,
}

#: The guess for a unit that :data:`UNIT_SECONDS` does not know, per test.
SECONDS_PER_TEST = 0.5


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: ``spark`` or ``spark-jobs``, its file, or itself (a JVM of
    its own in a file of the session's)."""
    module = nodeid.split("::", 1)[0]
    if nodeid in OWN_JVM_TESTS:
        return nodeid
    if module in OWN_JVM:
        return module
    if module in JOBS_SESSION:
        return "spark-jobs"
    return "spark" if module.startswith("tests/spark/") or module in SESSION_ELSEWHERE else module


def unit_seconds(unit: str, tests: int) -> float:
    """The expected length of a unit of ``tests`` tests."""
    return UNIT_SECONDS.get(unit, SECONDS_PER_TEST * tests)


def longest_first(units: Iterable[tuple[str, int]]) -> list[str]:
    """Unit names, ``(name, number of tests)`` given, in the order to deal them: longest first."""
    return [name for name, tests in sorted(units, key=lambda u: -unit_seconds(*u))]
