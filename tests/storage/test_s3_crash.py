"""kill -9 of a broker producing to an S3 or Azure warehouse with acks=all: nothing acknowledged is lost.

The broker is a subprocess (``_s3_crash_worker.py``) that logs each acknowledged record (fsynced); it is
killed twice at random moments, and a broker reopened from the bucket alone finds every acknowledged
record exactly once at its offset, and goes on producing from the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _s3_checks import check_acked, check_log, table_rows
from store_harness import Warehouse

from topiclake.platform import Broker, BrokerConfig, Record, Storage

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_s3_crash_worker.py")


def _acks(path: Path) -> dict[str, tuple[int, int]]:
    acked: dict[str, tuple[int, int]] = {}
    if path.exists():
        for line in path.read_text(encoding="ascii").splitlines(keepends=True):
            if line.endswith("\n"):
                _, value, partition, offset = line.split()
                acked[value] = (int(partition), int(offset))
    return acked


def test_kill_9_during_acks_all_produce_loses_nothing_acknowledged(store: Warehouse, tmp_path: Path) -> None:
    ack_file = tmp_path / "acks.txt"
    env = {**os.environ, "TOPICLAKE_STORAGE_OPTIONS": json.dumps(store.options)}
    rng = random.Random()
    for run in range(2):
        ready = Path(str(ack_file) + ".ready")
        ready.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, str(WORKER), store.uri, str(ack_file), f"r{run}"], env=env)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ready.exists(), "the worker acknowledged nothing"
            time.sleep(rng.uniform(0.3, 1.5))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    acked = _acks(ack_file)
    assert len({v.split("-")[0] for v in acked}) == 2  # both runs acknowledged records
    storage = Storage(store.uri, store.options)
    rows = table_rows(storage, "crash")
    check_log(rows, 2)
    check_acked(acked, rows)
    with Broker(storage, BrokerConfig(linger_ms=0)) as broker:
        (res,) = broker.produce("crash", [Record(value=b"after")], partition=0)
        assert res.offset == sum(1 for r in rows if r[1] == 0)
