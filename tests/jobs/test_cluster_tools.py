"""The standalone-cluster and spark-submit helpers without Spark: command lines, paths, the packed
environment's requirements and the code zip, and stale pid files. The real cluster runs in
tests/spark/test_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

import pytest

from topiclake.jobs.cluster import ClusterSpec, StandaloneCluster
from topiclake.jobs.pyenv import PackedEnv, code_zip, env_key, runtime_requirements
from topiclake.jobs.submit import (
    EXECUTOR_PYTHON,
    JOBS,
    absolutize_paths,
    parser,
    resolve_target,
    submit_command,
)


def test_resolve_target() -> None:
    assert resolve_target("compact") == "topiclake.jobs.compact:main"
    assert resolve_target("compact-keys") == "topiclake.jobs.compact_keys:main"
    assert resolve_target("register-tables") == "topiclake.spark.catalog:main"
    assert resolve_target("my.module") == "my.module:main"
    assert resolve_target("my.module:run") == "my.module:run"
    for bad in ("", "no such", "../x.py", "a..b"):
        with pytest.raises(ValueError):
            resolve_target(bad)
    assert set(JOBS) >= {"compact", "retention", "compact-keys", "vacuum", "reprocess", "probe"}


def test_relative_warehouse_paths_become_absolute(tmp_path: Path) -> None:
    args = [
        *("--warehouse", "data", "--topic", "orders"),
        *("--to-table=out/t", "--transform", "a.b:c", "--warehouse=s3://b/wh"),
    ]
    assert absolutize_paths(args, tmp_path) == [
        *("--warehouse", str(tmp_path / "data"), "--topic", "orders"),
        *(f"--to-table={tmp_path / 'out/t'}", "--transform", "a.b:c", "--warehouse=s3://b/wh"),
    ]
    assert absolutize_paths(["--warehouse", "/abs/wh"], tmp_path) == ["--warehouse", "/abs/wh"]


def test_cli_passes_everything_after_the_job_to_the_job() -> None:
    ns = parser().parse_args(
        ["--master", "spark://127.0.0.1:1", "compact", "--warehouse", "w", "--master", "x"]
    )
    assert ns.master == "spark://127.0.0.1:1"
    assert ns.job == "compact"
    assert ns.job_args == ["--warehouse", "w", "--master", "x"]


def test_submit_command_ships_the_archive_and_the_code(tmp_path: Path) -> None:
    env = PackedEnv("k", tmp_path / "environment", tmp_path / "environment.tar.gz", ())
    command = submit_command(
        "topiclake.jobs.compact:main",
        ["--topic", "orders"],
        master="spark://127.0.0.1:7077",
        env=env,
        code=tmp_path / "topiclake.zip",
        launcher=tmp_path / "launch.py",
        jars=["/j/delta.jar"],
        conf={"spark.executor.memory": "512m"},
    )
    assert Path(command[0]).name == "spark-submit"

    def value(flag: str) -> str:
        return command[command.index(flag) + 1]

    assert value("--master") == "spark://127.0.0.1:7077"
    assert value("--archives") == f"{tmp_path / 'environment.tar.gz'}#environment"
    assert value("--py-files") == str(tmp_path / "topiclake.zip")
    assert value("--jars") == "/j/delta.jar"
    confs = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert confs["spark.pyspark.python"] == EXECUTOR_PYTHON == "./environment/bin/python"
    assert confs["spark.driver.bindAddress"] == "127.0.0.1"
    assert confs["spark.executor.memory"] == "512m"
    assert confs["spark.sql.shuffle.partitions"] == "4"  # a cluster on this machine: few tasks
    assert command[-4:] == [str(tmp_path / "launch.py"), "topiclake.jobs.compact:main", "--topic", "orders"]


def test_environment_pins_the_installed_runtime_closure() -> None:
    pins = dict(r.split("==") for r in runtime_requirements())
    assert pins["deltalake"] == version("deltalake")
    assert pins["pyarrow"] == version("pyarrow")
    assert pins["pyspark"] == version("pyspark")  # the [spark] extra
    assert "numpy" in pins  # transitive (pandas, pyarrow)
    assert "topiclake" not in pins  # travels as a zip, not in the archive
    assert "pytest" not in pins and "ruff" not in pins  # the [dev] extra is not shipped
    key = env_key(sorted(f"{k}=={v}" for k, v in pins.items()))
    assert key == env_key([f"{k}=={v}" for k, v in pins.items()])  # order does not matter
    assert key != env_key([*(f"{k}=={v}" for k, v in pins.items() if k != "deltalake"), "deltalake==0.1"])


def test_code_zip_is_importable_without_the_source_tree(tmp_path: Path) -> None:
    archive = code_zip(tmp_path / "topiclake.zip")
    names = zipfile.ZipFile(archive).namelist()
    assert "topiclake/__init__.py" in names and "topiclake/jobs/submit.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # -S: no site-packages, so no editable install of the repository: only the zip can provide it
    code = "import sys; sys.path.insert(0, sys.argv[1]); import topiclake.errors as e; print(e.__file__)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(archive)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(archive / "topiclake" / "errors.py")


def test_status_and_stop_ignore_a_stale_pid_file(tmp_path: Path) -> None:
    """A pid file naming a live process that is not a Spark daemon (here: this test) is not "running"
    and stop() does not signal it."""
    spec = ClusterSpec.with_free_ports(worker_cores=1)
    assert len({spec.master_port, spec.master_webui_port, spec.worker_webui_port}) == 3
    tmp_path.joinpath("cluster.json").write_text(json.dumps(asdict(spec)))
    tmp_path.joinpath("master.pid").write_text(f"{os.getpid()}\n")
    tmp_path.joinpath("worker.pid").write_text("999999999\n")
    cluster = StandaloneCluster(tmp_path)
    assert cluster.spec == spec  # recorded ports are found again
    status = cluster.status()
    assert status.master_pid is None and status.worker_pid is None and not status.running
    assert status.master_url == f"spark://127.0.0.1:{spec.master_port}"
    cluster.stop()  # must not signal this process
    assert not tmp_path.joinpath("master.pid").exists()
