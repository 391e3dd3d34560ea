"""``--cpu-durations=N``: the N tests that cost the most CPU, counting every process they started.

Imported by name from tests/conftest.py (like tests/xdist_units.py). Wall-clock durations depend on what
else runs on the machine (other workers, other people's runs); CPU seconds much less. For each test
(setup, call and teardown together) this adds up:

- the CPU time of the pytest process itself (``getrusage(RUSAGE_SELF)``, all threads);
- the CPU time of every child it waited for, and of their waited-for descendants
  (``getrusage(RUSAGE_CHILDREN)``): brokers, CLI runs, spark-submit with its JVMs;
- the CPU time used during the test by descendants still running at its end (``/proc/PID/stat``, their
  own and their waited-for children's): the session's Spark JVM, a module's cluster.

A process that outlives its parent (a JVM whose Python was killed, or that Python never waited for) would
be adopted by init and its CPU lost: the measuring process makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``), so such orphans are adopted by it instead, and a thread waits for every
adopted one (only those: a process first seen as its own child is some ``Popen``'s to wait for).
While measuring, a killed orphan is a zombie until that thread (every 0.2 s) collects it.
Under xdist each worker measures its own tests; the report reaches the controller in the teardown
report's ``user_properties`` and is summed there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

_KEY = "cpu_seconds"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree(root: int) -> dict[tuple[int, int], tuple[int, str, float]]:
    """``(pid, start time) -> (parent pid, state, CPU seconds: own and waited-for children's)`` of every
    descendant of root."""
    stats: dict[int, tuple[int, str, int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17, starttime field 22
        ppid, start = int(fields[1]), int(fields[19])
        cpu = sum(int(v) for v in fields[11:15]) / _TICK
        stats[int(name)] = (ppid, fields[0], start, cpu)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[tuple[int, int], tuple[int, str, float]] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        ppid, state, start, cpu = stats[pid]
        out[(pid, start)] = (ppid, state, cpu)
        todo.extend(children.get(pid, []))
    return out


def _descendants(root: int) -> dict[tuple[int, int], float]:
    """``(pid, start time) -> CPU seconds`` of every descendant of root, zombies too (a zombie's stat
    keeps its CPU; once waited for, it is gone here and counted by its parent)."""
    return {key: cpu for key, (_, _, cpu) in _tree(root).items()}


_PR_SET_CHILD_SUBREAPER = 36


class _Adopter:
    """Waits for the orphans this process adopts as a child subreaper (see the module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.first_parent: dict[tuple[int, int], int] = {}
        self.lock = threading.Lock()
        libc = ctypes.CDLL(None, use_errno=True)
        self.enabled = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        if self.enabled:
            threading.Thread(target=self._run, name="cpu-durations-adopter", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(0.2)
            self.collect()

    def collect(self) -> None:
        with self.lock:
            for key, (ppid, state) in _parents(self.pid).items():
                first = self.first_parent.setdefault(key, ppid)
                if ppid == self.pid and first != self.pid and state == "Z":
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(key[0], os.WNOHANG)  # counted in RUSAGE_CHILDREN from now on


def _parents(root: int) -> dict[tuple[int, int], tuple[int, str]]:
    """``(pid, start time) -> (parent pid, state)`` of every descendant of root."""
    return {key: (ppid, state) for key, (ppid, state, _) in _tree(root).items()}


def _own() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + waited.ru_utime + waited.ru_stime


class CpuDurations:
    """The plugin: measures in every process that runs tests, reports where the terminal summary is."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.started: dict[str, tuple[float, float, dict[tuple[int, int], float]]] = {}
        self.measured: list[tuple[float, float, str]] = []
        self.adopter = _Adopter()

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        self.adopter.collect()
        self.started[item.nodeid] = (time.monotonic(), _own(), _descendants(os.getpid()))
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, None]:
        yield
        started = self.started.pop(item.nodeid, None)
        if started is None:
            return
        wall0, own0, alive0 = started
        self.adopter.collect()
        alive1 = _descendants(os.getpid())
        cpu = _own() - own0
        cpu += sum(v - alive0.get(k, 0.0) for k, v in alive1.items())
        # a process alive at the start and gone now was counted by whoever waited for it, from zero
        cpu -= sum(v for k, v in alive0.items() if k not in alive1)
        item.user_properties.append((_KEY, (max(cpu, 0.0), time.monotonic() - wall0)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == _KEY:
                cpu, wall = value
                self.measured.append((float(cpu), float(wall), report.nodeid))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.measured:
            return
        total = sum(cpu for cpu, _, _ in self.measured)
        terminalreporter.write_sep("=", f"cpu durations (top {self.top}; {total:.1f} CPU-s in all)")
        for cpu, wall, nodeid in sorted(self.measured, reverse=True)[: self.top]:
            terminalreporter.write_line(f"{cpu:8.1f} cpu-s {wall:8.1f} wall-s  {nodeid}")


def addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="show the N tests that cost the most CPU seconds, with every process they started",
    )


def configure(config: pytest.Config) -> None:
    top = config.getoption("--cpu-durations")
    if top is not None:
        config.pluginmanager.register(CpuDurations(top), "cpu_durations")
