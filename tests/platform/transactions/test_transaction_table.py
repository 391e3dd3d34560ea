"""``_system/transactions`` on a local warehouse: appends bypass delta-rs (platform/log/blind_append.py)
and the result is the table delta-rs would have made: every row readable by delta-rs, filtered reads
skip files by their statistics, a checkpoint every 100 versions, and two writers never lose a row."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable

from topiclake.platform import Storage
from topiclake.platform.log.blind_append import CHECKPOINT_INTERVAL
from topiclake.platform.transactions._group_commit import GroupCommit
from topiclake.platform.transactions._table import SCHEMA, Row, TransactionTable


def _row(tid: str, seq: int) -> Row:
    return Row("staged", tid, 7, 1, at_ms=1_000 + seq, txn_seq=seq, topic="t", partition=0, records=b"x")


def test_direct_appends_make_a_valid_delta_table_with_checkpoints(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    table = TransactionTable(storage)
    for i in range(CHECKPOINT_INTERVAL + 5):
        table.append([_row(f"id-{i % 3}", i)])
    dt = DeltaTable(table.uri)
    assert dt.version() == CHECKPOINT_INTERVAL + 4  # version 0 by delta-rs, the rest direct
    assert dt.to_pyarrow_table().schema.names == SCHEMA.names
    assert dt.to_pyarrow_table().num_rows == CHECKPOINT_INTERVAL + 5
    table.close()  # the checkpoint is written beside the commits: wait for it
    last = json.loads(Path(table.uri, "_delta_log", "_last_checkpoint").read_text())
    assert last["version"] == CHECKPOINT_INTERVAL
    entry = Path(table.uri, "_delta_log", f"{CHECKPOINT_INTERVAL + 1:020d}.json").read_text()
    stats = json.loads(json.loads(entry.splitlines()[1])["add"]["stats"])
    assert stats["minValues"]["transactional_id"] == "id-2" and stats["nullCount"]["records"] == 0
    assert sorted(r.txn_seq or 0 for r in table.rows_of("id-1")) == list(range(1, CHECKPOINT_INTERVAL + 5, 3))
    assert [r.records for r in table.records_of("id-0", 99, kind="staged")] == [b"x"]
    # the statistics let delta-rs's dataset skip files: a filter on the id touches only that id's files
    fragments = dt.to_pyarrow_dataset().get_fragments(filter=pc.field("transactional_id") == "id-1")
    assert len(list(fragments)) == len(range(1, CHECKPOINT_INTERVAL + 5, 3))


def test_two_writers_racing_lose_no_row(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    TransactionTable(storage).append([_row("init", 0)])
    writers = [TransactionTable(storage), TransactionTable(storage)]

    def run(w: int) -> None:
        for i in range(30):
            writers[w].append([_row(f"w{w}", i)])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, [0, 1]))
    rows = TransactionTable(storage).rows()
    assert sorted((r.transactional_id, r.txn_seq) for r in rows if r.transactional_id != "init") == sorted(
        (f"w{w}", i) for w in (0, 1) for i in range(30)
    )
    assert DeltaTable(writers[0].uri).version() == 60


def test_a_writer_lingers_for_as_many_callers_as_the_previous_commit_carried() -> None:
    """A producer's pipelined requests come back together after their commit and arrive again a moment
    apart: the first of them waits (up to the linger) for as many as the previous commit carried, so they
    share one commit instead of the first taking one of its own."""
    commits: list[list[int]] = []
    gate = threading.Event()

    def write(items: list[int]) -> None:
        if not commits:
            assert gate.wait(10)  # the next four queue up behind the first caller's commit
        commits.append(sorted(items))

    group = GroupCommit[int](write, linger_s=0.5)
    with ThreadPoolExecutor(5) as pool:
        first = [pool.submit(group.submit, [i]) for i in range(5)]
        time.sleep(0.05)
        gate.set()
        for job in first:
            job.result()
        assert commits == [[0], [1, 2, 3, 4]]
        later = []
        for i in range(5, 9):
            later.append(pool.submit(group.submit, [i]))
            time.sleep(0.002)
        for job in later:
            job.result()
    assert commits[2:] == [[5, 6, 7, 8]]
