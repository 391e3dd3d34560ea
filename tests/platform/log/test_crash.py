"""kill -9 of a producing broker at random moments: acknowledged records survive exactly once.

DESIGN §3 (crash safety): after ``kill -9`` at any moment, every record answered with ``acks=all`` is in the
table exactly once, offsets stay contiguous, and a broker restarts from the table alone. The producing
process is ``_crash_worker.py``; it logs each acknowledged record (fsynced) to an ack file. Set
``TOPICLAKE_CRASH_SEED`` to replay a failing run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, ProducerInfo, Record, Storage

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_crash_worker.py")
TOPIC = "crash"
PARTITIONS = 3


@dataclass
class Intent:
    thread: int
    producer_id: int
    base_sequence: int
    partition: int
    values: list[str]


@dataclass
class AckFile:
    acks: dict[str, tuple[int, int]] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)


def _seed() -> int:
    env = os.environ.get("TOPICLAKE_CRASH_SEED")
    return int(env) if env else random.randrange(1 << 30)


def _read_ack_file(path: Path) -> AckFile:
    """Complete lines only: the worker may have been killed in the middle of writing the last one."""
    out = AckFile()
    if not path.exists():
        return out
    for line in path.read_text(encoding="ascii").splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        parts = line.split()
        if parts[0] == "A":
            value, partition, offset = parts[1], int(parts[2]), int(parts[3])
            assert value not in out.acks, f"worker acked {value} twice"
            out.acks[value] = (partition, offset)
        elif parts[0] == "I":
            thread, pid, seq, partition = (int(x) for x in parts[1:5])
            out.intents.append(Intent(thread, pid, seq, partition, parts[5:]))
    return out


def _read_table(warehouse: Path) -> dict[str, tuple[int, int]]:
    """Every record of the topic table as value -> (partition, offset), checking the log's invariants."""
    uri = Storage(str(warehouse)).topic_uri(TOPIC)
    table = DeltaTable(uri).to_pyarrow_table(columns=["value", "partition", "offset"])
    values = [v.decode() for v in table["value"].to_pylist()]
    dup_values = [v for v, n in Counter(values).items() if n > 1]
    assert not dup_values, f"values written more than once: {dup_values[:10]}"
    for p in range(PARTITIONS):
        offsets = table.filter(pc.equal(table["partition"], p))["offset"].to_pylist()
        counts = Counter(offsets)
        shared = sorted(o for o, n in counts.items() if n > 1)
        assert not shared, f"partition {p}: offsets held by two records: {shared[:10]}"
        missing = sorted(set(range(len(offsets))) - set(offsets))
        assert sorted(offsets) == list(range(len(offsets))), (
            f"partition {p}: offsets not contiguous from 0 (missing {missing[:10]}, max {max(offsets)})"
        )
    return dict(
        zip(
            values, zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True), strict=True
        )
    )


def _ends(written: dict[str, tuple[int, int]]) -> dict[int, int]:
    counts = Counter(p for p, _ in written.values())
    return {p: counts.get(p, 0) for p in range(PARTITIONS)}


def _run_and_kill(
    warehouse: Path,
    ack_path: Path,
    err_path: Path,
    seed: int,
    run: str,
    delay_s: float,
    wait_ready: bool,
    *extra: str,
) -> None:
    """Start a worker, let it produce for ``delay_s`` (after its first ack if ``wait_ready``), SIGKILL it."""
    cmd = [sys.executable, str(WORKER), str(warehouse), str(ack_path), str(seed), run, *extra]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        ready = Path(str(ack_path) + ".ready")
        if wait_ready:
            deadline = time.monotonic() + 30
            while not ready.exists():
                assert proc.poll() is None, (
                    f"worker {run} exited ({proc.returncode}):\n{err_path.read_text()}"
                )
                assert time.monotonic() < deadline, f"worker {run} never acked:\n{err_path.read_text()}"
                time.sleep(0.02)
        time.sleep(delay_s)
        assert proc.poll() is None, (
            f"worker {run} exited ({proc.returncode}) before the kill:\n{err_path.read_text()}"
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"worker {run}: {proc.returncode}\n{err_path.read_text()}"


def _check_acked(
    acked: dict[str, tuple[int, int]], written: dict[str, tuple[int, int]], context: str
) -> None:
    lost = [v for v in acked if v not in written]
    assert not lost, f"{context}: {len(lost)} acknowledged records are not in the table: {lost[:10]}"
    moved = {v: (acked[v], written[v]) for v in acked if written[v] != acked[v]}
    assert not moved, (
        f"{context}: acknowledged records at another (partition, offset): {list(moved.items())[:10]}"
    )


def _check_restart(warehouse: Path, written: dict[str, tuple[int, int]], context: str) -> None:
    """A broker opened on the warehouse alone recovers each partition's end from the table."""
    ends = _ends(written)
    with Broker(Storage(str(warehouse)), BrokerConfig(linger_ms=0)) as broker:
        recovered = {p: broker.list_offsets(TOPIC, p, "latest") for p in range(PARTITIONS)}
    assert recovered == ends, f"{context}: recovered ends {recovered}, table ends {ends}"


def test_kill9_while_producing_keeps_every_acked_record_once(tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    warehouse = tmp_path / "wh"
    acked: dict[str, tuple[int, int]] = {}
    for run in range(5):
        context = f"seed {seed} run {run}"
        ack_path = tmp_path / f"acks-{run}.txt"
        err_path = tmp_path / f"worker-{run}.err"
        # Run 1 may be killed anywhere, even while it creates the topic; the others after they produced.
        early = run == 1
        delay = rng.uniform(0.0, 0.5) if early else rng.uniform(0.3, 2.0)
        _run_and_kill(warehouse, ack_path, err_path, seed, f"r{run}", delay, not early)
        acks = _read_ack_file(ack_path)
        acked.update(acks.acks)
        if not Path(str(ack_path) + ".ready").exists() and not Storage(str(warehouse)).is_table(
            Storage(str(warehouse)).topic_uri(TOPIC)
        ):
            continue  # killed before the topic table existed
        written = _read_table(warehouse)
        _check_acked(acked, written, context)
        _check_restart(warehouse, written, context)
    assert len(acked) > 100, f"seed {seed}: too few acknowledged records ({len(acked)}) to prove anything"

    written = _read_table(warehouse)
    ends = _ends(written)
    with Broker(Storage(str(warehouse)), BrokerConfig(linger_ms=0)) as broker:
        for p in range(PARTITIONS):
            (res,) = broker.produce(TOPIC, [Record(value=f"after-{p}".encode())], partition=p)
            assert res.error is None
            assert (res.partition, res.offset) == (p, ends[p]), (
                f"seed {seed}: partition {p} continued at {res}"
            )
    final = _read_table(warehouse)
    _check_acked(acked, final, f"seed {seed} after restart")
    assert _ends(final) == {p: ends[p] + 1 for p in range(PARTITIONS)}


def test_kill9_during_idempotent_produce_then_retry_writes_at_most_once(tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    warehouse = tmp_path / "wh"
    acked: dict[str, tuple[int, int]] = {}
    retried = {"landed": 0, "not_landed": 0}
    for run in range(3):
        context = f"seed {seed} run {run}"
        ack_path = tmp_path / f"acks-{run}.txt"
        err_path = tmp_path / f"worker-{run}.err"
        _run_and_kill(
            warehouse, ack_path, err_path, seed, f"r{run}", rng.uniform(0.3, 2.0), True, "--idempotent"
        )
        acks = _read_ack_file(ack_path)
        acked.update(acks.acks)
        before = _read_table(warehouse)
        _check_acked(acked, before, context)

        last: dict[int, Intent] = {}
        for intent in acks.intents:
            last[intent.thread] = intent
        with Broker(Storage(str(warehouse)), BrokerConfig(linger_ms=0)) as broker:
            for intent in last.values():
                if all(v in acks.acks for v in intent.values):
                    continue
                # The batch's commit is atomic: all of it landed or none.
                landed = [v in before for v in intent.values]
                assert all(landed) or not any(landed), f"{context}: batch half written: {intent}"
                records = [Record(value=v.encode(), partition=intent.partition) for v in intent.values]
                info = ProducerInfo(intent.producer_id, 0, intent.base_sequence)
                results = broker.produce(TOPIC, records, acks="all", producer=info)
                assert all(r.error is None for r in results), (
                    f"{context}: retry of {intent} failed: {results}"
                )
                got = {v: (r.partition, r.offset) for v, r in zip(intent.values, results, strict=True)}
                if all(landed):
                    retried["landed"] += 1
                    original = {v: before[v] for v in intent.values}
                    assert got == original, f"{context}: retry answered {got}, original offsets {original}"
                else:
                    retried["not_landed"] += 1
                acked.update(got)
        after = _read_table(warehouse)
        _check_acked(acked, after, f"{context} after retries")
        _check_restart(warehouse, after, context)
    assert len(acked) > 50, f"seed {seed}: too few acknowledged records ({len(acked)})"
    assert sum(retried.values()) > 0, f"seed {seed}: no batch was ever in flight at a kill: {retried}"


def test_idempotent_retry_after_restart_answers_original_offsets(tmp_path: Path) -> None:
    """The deterministic half of the kill test: a batch that landed is not written again by a new broker."""
    storage = Storage(str(tmp_path))
    records = [Record(value=f"v{i}".encode()) for i in range(7)]  # keyless: spread over the partitions
    with Broker(storage, BrokerConfig(linger_ms=0)) as first:
        first.create_topic(TOPIC, partitions=PARTITIONS)
        producer = first.init_producer()
        first.produce(TOPIC, [Record(value=b"before")], producer=producer)
        info = ProducerInfo(producer.producer_id, 0, 1)
        original = [(r.partition, r.offset) for r in first.produce(TOPIC, records, producer=info)]
    before = _read_table(tmp_path)
    with Broker(storage, BrokerConfig(linger_ms=0)) as second:
        retry = [(r.partition, r.offset) for r in second.produce(TOPIC, records, producer=info)]
        (nxt,) = second.produce(
            TOPIC, [Record(value=b"next")], producer=ProducerInfo(producer.producer_id, 0, 8)
        )
    assert retry == original
    after = _read_table(tmp_path)
    assert len(after) == len(before) + 1
    assert after[b"next".decode()] == (nxt.partition, nxt.offset)
