"""infra/cluster.sh: start brokers by pid file, report them, kill one, stop them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from topiclake.process.ports import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "cluster.sh"


def test_start_status_kill_stop(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "TOPICLAKE_BROKERS_DIR": str(tmp_path / "state"),
        "TOPICLAKE_CLUSTER_BASE_PORT": str(port),
        "TOPICLAKE_WAREHOUSE": str(tmp_path / "wh"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env
        )

    pids = tmp_path / "state"
    try:
        started = run("start", "1", "--", "--log-level", "warning")
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"bootstrap: 127.0.0.1:{port}" in started.stdout
        assert (tmp_path / "wh").is_dir()
        again = run("start", "1")
        assert again.returncode == 1 and "running already" in again.stderr
        status = run("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "broker 1: alive" in status.stdout and "controller 1" in status.stdout
        assert run("kill", "1").returncode == 0
        status = run("status")
        assert status.returncode == 3 and "broker 1: dead" in status.stdout
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not list(pids.glob("*.pid"))
