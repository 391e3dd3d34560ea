"""Stopping the helper processes this package starts (the S3 server, the counting proxy), by pid."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen[str] | None) -> None:
    """SIGTERM, SIGKILL after 10 s; close its output pipe. Nothing if it is not running."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
