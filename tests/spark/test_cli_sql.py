"""``topiclake sql``: output formats, several statements, clear errors, and the persistent catalog.

In process (Typer's CliRunner) on the shared session with ``--no-catalog``; then the real command in its own
JVM with the warehouse's persistent catalog, and a second JVM -- a plain pyspark session built from
``--print-conf``, as a notebook would -- that sees the tables without registering anything.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.cli.sql import split_statements
from topiclake.errors import SqlError
from topiclake.platform import Broker, BrokerConfig, Record
from topiclake.platform.storage import Storage
from topiclake.spark.catalog_sql import error_summary

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture
def broker(warehouse: str) -> Iterator[Broker]:
    b = Broker(Storage(warehouse), BrokerConfig(linger_ms=2, maintenance=False))
    try:
        b.create_topic("orders", partitions=2)
        records = [
            Record(key=b"k%d" % (i % 2), value=b"v%d" % i, timestamp_ms=BASE_MS + 1000 * i, partition=i % 2)
            for i in range(6)
        ]
        headers = [("h", b"1")]
        records.append(Record(None, b"\xff\x00", headers, timestamp_ms=BASE_MS + 6000, partition=0))
        assert all(r.error is None for r in b.produce("orders", records))
        b.groups.commit("billing", None, -1, {("orders", 0): 1})
        yield b
    finally:
        b.close()


def test_split_statements() -> None:
    text = """
        -- a comment; not a statement
        SELECT 'a;b' AS x, "c;d" AS y, `e;f` FROM t;  /* block; comment */
        SELECT 'it\\'s;' ;;
        ;
        SELECT 1 -- trailing; comment
    """
    assert split_statements(text) == [
        "-- a comment; not a statement\n        SELECT 'a;b' AS x, \"c;d\" AS y, `e;f` FROM t",
        "/* block; comment */\n        SELECT 'it\\'s;'",
        "SELECT 1 -- trailing; comment",
    ]
    assert split_statements("  ;  -- nothing\n ; /* */") == []


def test_error_summary_is_the_first_line_unless_it_breaks_off() -> None:
    first = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)"
    assert error_summary(first + "\n\n== SQL ==\nSELEC") == first
    wrapped = "[DELTA_X] The timestamp is before the version available to\nthis table (t0). Use t1.\nmore"
    assert (
        error_summary(wrapped)
        == "[DELTA_X] The timestamp is before the version available to this table (t0). Use t1."
    )


def test_print_conf_starts_no_spark(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["sql", "--print-conf", "--warehouse", str(tmp_path)])
    assert result.exit_code == 0, result.output
    flags = dict(line.removeprefix("--conf ").split("=", 1) for line in result.stdout.splitlines())
    assert flags["spark.sql.catalogImplementation"] == "hive"
    home = tmp_path / "_system" / "spark_catalog"
    assert flags["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true"
    )
    assert flags["spark.sql.warehouse.dir"] == str(home / "warehouse")
    assert flags["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert flags["spark.topiclake.warehouse"] == str(tmp_path)
    assert "spark.master" not in flags and "spark.app.name" not in flags

    in_memory = runner.invoke(app, ["sql", "--print-conf", "--no-catalog", "--warehouse", str(tmp_path)])
    assert "catalogImplementation" not in in_memory.stdout
    remote = runner.invoke(app, ["sql", "--print-conf", "--warehouse", "s3a://bucket/lake"])
    assert "catalogImplementation" not in remote.stdout  # Derby needs a local directory
    missing = runner.invoke(app, ["sql", "--print-conf", "--warehouse", str(tmp_path / "typo")])
    assert missing.exit_code == 1 and "no warehouse at" in str(missing.exception)
    assert not (tmp_path / "typo").exists()  # nothing created for a mistyped warehouse


def test_formats_statements_and_errors(
    spark: SparkSession, broker: Broker, warehouse: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    base = ["sql", "--warehouse", warehouse, "--no-catalog", "--spark-log-level", "warn"]
    try:
        as_json = runner.invoke(
            app,
            [
                *base,
                "--format",
                "json",
                "SELECT partition, offset, key, value, headers, timestamp FROM orders WHERE key IS NULL; "
                "SELECT CAST(key AS STRING) AS key, count(*) AS n FROM topiclake.orders GROUP BY 1 "
                "ORDER BY 1",
            ],
        )
        assert as_json.exit_code == 0, as_json.output
        lines = [json.loads(line) for line in as_json.stdout.splitlines()]
        assert lines[0]["key"] is None  # null fields are kept
        assert base64.b64decode(lines[0]["value"]) == b"\xff\x00"  # binary as base64
        assert lines[0]["headers"] == [{"key": "h", "value": base64.b64encode(b"1").decode()}]
        assert lines[0]["timestamp"] == "2026-01-01T00:00:06.000Z"
        assert lines[1:] == [{"key": None, "n": 1}, {"key": "k0", "n": 3}, {"key": "k1", "n": 3}]

        as_csv = runner.invoke(
            app, [*base, "--format", "csv", "SELECT `group`, topic, partition, lag FROM consumer_lag"]
        )
        assert as_csv.exit_code == 0, as_csv.output
        rows = list(csv.reader(io.StringIO(as_csv.stdout)))
        assert broker.list_offsets("orders", 0, "latest") == 4
        assert rows == [["group", "topic", "partition", "lag"], ["billing", "orders", "0", "3"]]

        sql_file = tmp_path / "q.sql"
        sql_file.write_text(
            "-- several statements from a file\n"
            "CREATE OR REPLACE TEMP VIEW late AS SELECT * FROM orders\n"
            "  WHERE timestamp >= TIMESTAMP'2026-01-01 00:00:04';\n"
            "SELECT offset, CAST(value AS STRING) AS value, timestamp, headers\n"
            "  FROM late ORDER BY timestamp;\n"
        )
        as_table = runner.invoke(app, [*base, "-f", str(sql_file), "--max-rows", "2"])
        assert as_table.exit_code == 0, as_table.output
        out = as_table.stdout
        assert "value" in out and "v4" in out and "v5" in out and "2026-01-01 00:00:04" in out
        assert "NULL" in out  # headers of v4
        assert "2026-01-01 00:00:06" not in out  # the third row is beyond --max-rows
        assert "only the first 2 rows" in as_table.stderr

        bad = runner.invoke(app, [*base, "SELECT count(*) FROM orders; SELECT * FROM no_such_topic"])
        assert bad.exit_code == 1
        assert isinstance(bad.exception, SqlError)
        assert bad.exception.message.startswith("[TABLE_OR_VIEW_NOT_FOUND]")
        assert bad.exception.message.endswith("(statement 2)") and "\n" not in bad.exception.message
        assert bad.stdout.splitlines()[-1].split() == ["7"]  # statement 1 ran and printed

        nothing = runner.invoke(app, [*base, " -- just a comment"])
        assert nothing.exit_code == 1 and "no SQL statement" in str(nothing.exception)
    finally:
        spark.sql("USE default")
        spark.conf.unset("spark.topiclake.warehouse")
        spark.sparkContext.setLogLevel("WARN")
        from topiclake.spark import register

        register(spark)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topiclake.cli", "sql", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("TOPICLAKE_")},
    )


NOTEBOOK = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("notebook")
    for flag in sys.argv[1:]:
        if flag != "--conf":
            key, value = flag.split("=", 1)
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    lag = spark.table("topiclake.consumer_lag")
    print(json.dumps({
        "tables": sorted(r["tableName"] for r in spark.sql("SHOW TABLES IN topiclake").collect()),
        "count": spark.sql("SELECT count(*) AS n FROM topiclake.orders").collect()[0]["n"],
        "v1": spark.sql("SELECT count(*) AS n FROM topiclake.orders VERSION AS OF 1").collect()[0]["n"],
        "lag": [r.asDict() for r in lag.select("group", "partition", "lag").collect()],
    }))
    """
)


def test_persistent_catalog_is_seen_by_a_second_jvm(broker: Broker, warehouse: str, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    first = _cli(
        "--warehouse", warehouse, "--format", "csv", "SELECT count(*) AS n FROM orders; SELEC 1", cwd=cwd
    )
    assert first.returncode == 1, first.stderr
    assert first.stdout == "n\n7\n"  # statement 1 ran before statement 2 failed
    assert first.stderr.splitlines()[-1].startswith(
        "SqlError: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'"
    )
    assert "\tat " not in first.stderr and "Traceback" not in first.stderr
    assert sorted(p.name for p in cwd.iterdir()) == []  # no derby.log, metastore_db or spark-warehouse here
    home = Path(warehouse) / "_system" / "spark_catalog"
    assert {p.name for p in home.iterdir()} >= {"metastore_db", "warehouse", "derby.log"}

    flags = _cli("--warehouse", warehouse, "--print-conf", cwd=cwd)
    assert flags.returncode == 0, flags.stderr
    second = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, *flags.stdout.split()],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    seen = json.loads(second.stdout.splitlines()[-1])
    assert seen["tables"] == ["consumer_lag", "consumer_offsets", "orders", "partition_offsets"]
    assert seen["count"] == 7 and seen["v1"] == 7  # version 1: the one produce commit
    assert seen["lag"] == [{"group": "billing", "partition": 0, "lag": 3}]
