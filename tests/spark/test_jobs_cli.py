"""``topiclake jobs ...`` runs a job in-process on the running Spark session (rich progress on stderr, the
summary or JSON on stdout) and leaves that session running."""

from __future__ import annotations

import json
from pathlib import Path

from _jobs_support import BASE_TS, make_topic, rounds, table_rows
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from topiclake.cli import app


def test_cli_runs_jobs_in_process(spark: SparkSession, warehouse: str, tmp_path: Path) -> None:
    topic = make_topic(warehouse, partitions=2, configs={"segment.bytes": "600"}, batches=rounds(2, 8, 3))
    before = table_rows(topic.uri)
    runner = CliRunner()

    result = runner.invoke(
        app, ["jobs", "compact", "--warehouse", warehouse, "--topic", "orders", "--partition", "1", "--json"]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    doc = json.loads(result.stdout)
    assert doc["job"] == "compact"
    [res] = doc["topics"]
    assert res["topic"] == "orders" and res["partitions"] == 1
    assert res["files_before"] == 16 and res["files_after"] < 16
    assert res["log_start_offsets"] == {"0": 0, "1": 0}
    assert table_rows(topic.uri) == before
    assert spark.sparkContext._jsc is not None  # the test session is still running
    assert spark.range(3).count() == 3

    out = str(tmp_path) + "/replay"
    start = "2023-11-14T22:13:22Z"  # BASE_TS + 2 s: rounds 2..7, 3 records each, both partitions
    assert BASE_TS + 2000 == 1_700_000_002_000
    result = runner.invoke(
        app,
        [
            "jobs",
            "reprocess",
            "--warehouse",
            warehouse,
            "--topic",
            "orders",
            "--job-id",
            "cli-1",
            "--to-table",
            out,
            "--from-timestamp",
            start,
        ],
        env={"TOPICLAKE_JOBS_TO_TIMESTAMP": str(BASE_TS + 7000)},
    )
    assert result.exit_code == 0, (result.output, result.exception)
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("reprocess: orders: 2 partitions") and "written 30" in line
    assert "offsets orders/0:6-21 orders/1:6-21" in line
    assert DeltaTable(out).transaction_version("topiclake-reprocess-cli-1") == 1
