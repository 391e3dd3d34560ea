"""``--cpu-durations`` (tests/cpu_durations.py) counts the CPU of the processes a test starts, orphans too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFTEST = """
import cpu_durations

def pytest_addoption(parser):
    cpu_durations.addoption(parser)

def pytest_configure(config):
    cpu_durations.configure(config)
"""

# One test whose own process burns nothing and whose grandchild -- orphaned at once, as a JVM is when its
# Python dies -- burns ~1 s of CPU; one test that burns nothing.
TESTS = """
import pathlib, subprocess, sys, time

SPIN = (
    "import pathlib, time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: pass\\n"
    "pathlib.Path('spun').touch()"
)

def test_orphan_burns():
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {SPIN!r}])"]
    )
    parent.wait()  # the grandchild lives on, adopted by whoever adopts orphans
    deadline = time.monotonic() + 60  # 1 s of CPU takes longer on a loaded machine
    while not pathlib.Path("spun").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)

def test_idle():
    time.sleep(0.1)
"""


def test_cpu_of_an_orphaned_grandchild_is_counted(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_burn.py").write_text(textwrap.dedent(TESTS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--cpu-durations=5"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = {
        m.group(2): float(m.group(1))
        for m in re.finditer(r"^\s*([\d.]+) cpu-s\s+[\d.]+ wall-s\s+\S+::(\w+)$", proc.stdout, re.M)
    }
    assert seen.keys() == {"test_orphan_burns", "test_idle"}, proc.stdout
    assert seen["test_orphan_burns"] >= 0.9, proc.stdout  # the spinner's 1 s, plus two interpreters
    assert seen["test_idle"] < 0.5, proc.stdout
