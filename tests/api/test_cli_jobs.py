"""``topiclake jobs`` and ``python -m topiclake.jobs.<job>`` on bad input: clear errors before any Spark
starts (no JVM in these tests). Successful runs are in tests/spark/test_jobs_cli.py.

Errors found in a table are checked in-process (``topiclake.cli.run`` and the jobs' ``main``): a process
that opened a Delta table with deltalake 1.6.6 + pyarrow sometimes aborts at interpreter exit ("terminate
called without an active exception", delta-io/delta-rs#2184), which would make the exit code flaky.
Usage errors, found before any table is opened, are checked in a real subprocess."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import topiclake.cli
from topiclake.platform import Broker, BrokerConfig, Record, Storage

TIMEOUT_S = 60


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOPICLAKE_")}
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**clean, "COLUMNS": "250", **(env or {})},
    )


def fails(proc: subprocess.CompletedProcess[str], code: int, expected: str) -> None:
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> subprocess.CompletedProcess[str]:
    """``topiclake ARGS`` in this process, as the console script runs it: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["topiclake", *args])
    capsys.readouterr()
    code = topiclake.cli.run()
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def job_main(capsys: pytest.CaptureFixture[str], module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m topiclake.jobs.MODULE ARGS`` in this process."""
    capsys.readouterr()
    try:
        code = importlib.import_module(f"topiclake.jobs.{module}").main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A warehouse with topic ``orders`` (2 partitions, one record)."""
    root = str(tmp_path_factory.mktemp("jobs-cli") / "wh")
    with Broker(Storage(root), BrokerConfig(maintenance=False)) as broker:
        broker.create_topic("orders", partitions=2)
        broker.produce("orders", [Record(key=b"k", value=b"v")], partition=0)
    return root


def test_jobs_help_lists_every_job() -> None:
    proc = run("-m", "topiclake.cli", "jobs", "--help")
    assert proc.returncode == 0, proc.stderr
    for job in ("compact", "retention", "compact-keys", "vacuum", "reprocess"):
        assert job in proc.stdout


@pytest.mark.parametrize("job", ["compact", "retention", "compact-keys", "vacuum"])
def test_unknown_topic_exits_1_with_the_error(
    warehouse: str, job: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = cli(capsys, monkeypatch, "jobs", job, "--warehouse", warehouse, "--topic", "nope")
    fails(proc, 1, "TopicNotFound: topic 'nope' does not exist")


def test_options_come_from_the_environment(
    warehouse: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPICLAKE_WAREHOUSE", warehouse)
    monkeypatch.setenv("TOPICLAKE_JOBS_TOPIC", "missing")
    fails(cli(capsys, monkeypatch, "jobs", "compact"), 1, "TopicNotFound: topic 'missing'")
    monkeypatch.setenv("TOPICLAKE_JOBS_TOPIC", "orders")
    monkeypatch.setenv("TOPICLAKE_JOBS_PARTITION", "7")
    proc = cli(capsys, monkeypatch, "jobs", "compact")
    fails(proc, 1, "PartitionNotFound: topic orders has no partition 7")


def test_empty_warehouse_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = cli(capsys, monkeypatch, "jobs", "vacuum", "--warehouse", str(tmp_path / "wh"), "--topic", "t")
    fails(proc, 1, "has no topics")
    assert not (tmp_path / "wh" / "_system").exists()


def test_bad_transform_and_targets_exit_1(
    warehouse: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["jobs", "reprocess", "--warehouse", warehouse, "--topic", "orders"]
    target = ["--to-table", str(tmp_path / "out")]

    def reprocess(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(capsys, monkeypatch, *base, *args)

    fails(
        reprocess("--job-id", "j", "--transform", "no_such_module_x:fn", *target),
        1,
        "InvalidRequest: --transform no_such_module_x:fn: cannot import module 'no_such_module_x'",
    )
    fails(reprocess("--job-id", "j", "--transform", "json:nope", *target), 1, "module 'json' has no 'nope'")
    fails(reprocess("--job-id", "j", "--transform", "json", *target), 1, "must be MODULE:FUNCTION")
    fails(reprocess("--job-id", "j"), 1, "give exactly one of --to-topic and --to-table")
    fails(reprocess("--job-id", "j", "--to-topic", "nowhere"), 1, "TopicNotFound: topic 'nowhere'")
    fails(reprocess("--job-id", "a b", *target), 1, "--job-id must be")
    fails(reprocess("--job-id", "j", "--from-offset", "1", "--to-timestamp", "5", *target), 1, "not both")
    assert not (tmp_path / "out").exists()


def test_bad_arguments_are_usage_errors(warehouse: str) -> None:
    cli = ["-m", "topiclake.cli", "jobs"]
    fails(run(*cli, "compact", "--warehouse", warehouse), 2, "Missing option '--topic'")
    fails(run(*cli, "compact", "--topic", "orders", "--min-files", "0"), 2, "--min-files")
    fails(run(*cli, "reprocess", "--topic", "orders", "--to-table", "x"), 2, "Missing option '--job-id'")
    fails(
        run(*cli, "reprocess", "--topic", "o", "--job-id", "j", "--from-timestamp", "yesterday"),
        2,
        "neither ms since the epoch nor an ISO 8601 time",
    )
    fails(run(*cli, "vacuum", "--topic", "orders", "--retention-hours", "0.5"), 2, "--retention-hours")


def test_job_modules_exit_1_on_errors_and_2_on_bad_arguments(
    warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fails(
        job_main(capsys, "compact", "--warehouse", warehouse, "--topic", "nope"),
        1,
        "TopicNotFound: topic 'nope' does not exist",
    )
    fails(
        job_main(
            capsys,
            "reprocess",
            "--warehouse",
            warehouse,
            "--topic",
            "orders",
            "--job-id",
            "j",
            "--to-table",
            "x",
            "--transform",
            "nope_mod:f",
        ),
        1,
        "InvalidRequest: --transform nope_mod:f: cannot import module 'nope_mod'",
    )
    fails(
        run("-m", "topiclake.jobs.reprocess", "--warehouse", warehouse, "--topic", "orders", "--job-id", "j"),
        2,
        "one of the arguments --to-topic --to-table is required",
    )
    fails(run("-m", "topiclake.jobs.retention", "--warehouse", warehouse), 2, "--topic")
    fails(
        run("-m", "topiclake.jobs.vacuum", "--topic", "orders", "--retention-hours", "0.5"),
        2,
        "not a whole number of hours",
    )
