"""The daemons a standalone cluster starts: whether a recorded pid is still ours and alive, and stopping a
daemon's whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["alive", "command_line", "terminate_group"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child of this process does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process is not alive
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def command_line(pid: int) -> str:
    """The command line of ``pid`` (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        pass
    result = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
    return result.stdout


def terminate_group(pid: int, timeout_s: float) -> None:
    """SIGTERM the process group led by ``pid`` (a daemon started by us), SIGKILL it after ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while alive(pid) and time.monotonic() < deadline + 5:
        time.sleep(0.1)
