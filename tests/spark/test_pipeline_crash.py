"""A Spark pipeline topic -> transform -> topic is exactly once across kill -9 and restart.

The pipeline runs in its own process (``_pipeline_worker.py``: topiclake source -> upper() -> topiclake
sink, checkpointed) while this test produces to the input topic through a broker. The worker is killed with
SIGKILL once some output exists, restarted on the same checkpoint, and left to catch up: every input record
must then be in the output exactly once, with contiguous offsets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage

WORKER = Path(__file__).with_name("_pipeline_worker.py")
TOTAL = 600


def _out_values(storage: Storage) -> list[bytes]:
    uri = storage.topic_uri("out")
    return DeltaTable(uri).to_pyarrow_table(columns=["value"])["value"].to_pylist()


def _start(warehouse: str, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, str(WORKER), warehouse, str(checkpoint)], stdout=subprocess.DEVNULL, stderr=err
        )


def _wait_for(predicate: object, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        assert proc.poll() is None, f"pipeline worker exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s; worker log:\n{log.read_text()[-3000:]}")


def test_pipeline_is_exactly_once_across_kill9(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    storage = Storage(warehouse)
    broker = Broker(storage, BrokerConfig())
    broker.create_topic("in", 2)
    broker.create_topic("out", 2)
    checkpoint = tmp_path / "ckpt"
    log = tmp_path / "worker.log"
    produced = 0

    def produce(n: int) -> None:
        nonlocal produced
        batch = [
            Record(key=str(i % 9).encode(), value=f"r{i}".encode()) for i in range(produced, produced + n)
        ]
        assert all(r.error is None for r in broker.produce("in", batch, acks="all"))
        produced += n

    produce(200)
    proc = _start(warehouse, checkpoint, log)
    try:
        # kill it once it has written some, but not all, of the output
        _wait_for(lambda: len(_out_values(storage)) >= 80, proc, log, 240)
        produce(200)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        before_restart = len(_out_values(storage))
        assert before_restart < produced
        produce(TOTAL - produced)
        proc = _start(warehouse, checkpoint, log)
        _wait_for(lambda: len(_out_values(storage)) >= TOTAL, proc, log, 240)
        time.sleep(1.0)  # a duplicate would show up in the next micro-batch
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        broker.close()
    values = _out_values(storage)
    assert len(values) == len(set(values)) == TOTAL, f"{len(values)} written, {len(set(values))} distinct"
    assert set(values) == {f"R{i}".encode() for i in range(TOTAL)}
    rows = DeltaTable(storage.topic_uri("out")).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    for p in range(2):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
