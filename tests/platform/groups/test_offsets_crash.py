"""kill -9 during consumer-group offsets commits: each commit is in the offsets table wholly or not at all.

A worker process commits the offsets of 24 partitions at once, for two groups, in a loop (group commit
merges the two groups' commits into shared Delta commits; the store's compaction rewrites the table now
and then). It is killed with SIGKILL at varied moments. After each kill the offsets table, read with
delta-rs and through a new broker, shows every commit ``RUN:k`` on all 24 partitions or on none, the
newest commit of each group on every partition alike, and never older than the last acknowledged one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, GroupCoordinator, Storage

WORKER = Path(__file__).with_name("_offsets_crash_worker.py")
PARTITIONS = 24  # as in the worker
DELAYS_S = [0.0, 0.05, 0.13, 0.3, 0.55, 0.9, 1.4]


def _run_and_kill(warehouse: Path, ack: Path, err: Path, run: str, delay_s: float) -> None:
    with open(err, "wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(warehouse), str(ack), run],
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
    try:
        ready = Path(str(ack) + ".ready")
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, f"worker {run} exited ({proc.returncode}):\n{err.read_text()}"
            assert time.monotonic() < deadline, f"worker {run} never committed:\n{err.read_text()}"
            time.sleep(0.01)
        time.sleep(delay_s)
        assert proc.poll() is None, f"worker {run} exited ({proc.returncode}):\n{err.read_text()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    ready.unlink(missing_ok=True)
    assert proc.returncode == -signal.SIGKILL, f"worker {run}: {proc.returncode}\n{err.read_text()}"


def _acked(ack: Path, run: str) -> dict[str, int]:
    """The last acknowledged commit number of each group in this run (complete lines only)."""
    last: dict[str, int] = {}
    for line in ack.read_text().split("\n")[:-1]:
        _, group, tag = line.split()
        r, k = tag.split(":")
        if r == run:
            last[group] = max(last.get(group, 0), int(k))
    return last


def _check_table(warehouse: Path, run: str, acked: dict[str, int]) -> None:
    rows = DeltaTable(str(warehouse / "_system" / "consumer_offsets")).to_pyarrow_table().to_pylist()
    per_commit = Counter((r["group"], r["metadata"]) for r in rows)
    torn = {key: n for key, n in per_commit.items() if n != PARTITIONS}
    assert not torn, f"run {run}: commits with some but not all of their {PARTITIONS} offsets: {torn}"
    newest: dict[tuple[str, int], tuple[int, str]] = {}
    for r in rows:
        key = (r["group"], r["partition"])
        if key not in newest or r["commit_seq"] > newest[key][0]:
            newest[key] = (r["commit_seq"], r["metadata"])
    for group, k in acked.items():
        tags = {tag for (g, _p), (_s, tag) in newest.items() if g == group}
        assert len(tags) == 1, f"run {run}: group {group} partitions show different commits {tags}"
        (tag,) = tags
        r, got = tag.split(":")
        assert r == run and int(got) in (k, k + 1), f"run {run}: {group} shows {tag}, last acked {run}:{k}"


@pytest.mark.slow
def test_kill9_during_offsets_commits_leaves_each_commit_whole_or_absent(tmp_path: Path) -> None:
    warehouse, ack, err = tmp_path / "wh", tmp_path / "acks", tmp_path / "err"
    for i, delay in enumerate(DELAYS_S):
        run = f"r{i}"
        _run_and_kill(warehouse, ack, err, run, delay)
        acked = _acked(ack, run)
        assert acked, f"run {run}: nothing acknowledged"
        _check_table(warehouse, run, acked)
    # and a broker restarted on the table serves exactly what the table says
    with Broker(Storage(str(warehouse)), BrokerConfig()) as broker:
        coordinator = GroupCoordinator(broker)
        for group in ("g0", "g1"):
            tags = {c.metadata for c in coordinator.committed(group, "o").values()}
            assert len(tags) == 1 and len(coordinator.committed(group, "o")) == PARTITIONS, tags
