"""Reading ``txn`` state from snapshots that log cleanup outran (issue 25), on real Delta tables."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.platform.storage.delta_state import StateReader, log_entries_gone, read_txn

ROW = pa.table({"a": [1]})


def _cleaned_table(uri: str, commits: int) -> DeltaTable:
    """A table whose snapshot (returned) was taken at version 0, then ``commits`` commits, each advancing
    the ``txn`` app "app", a checkpoint, and every entry behind it deleted."""
    props = {"delta.logRetentionDuration": "interval 0 seconds"}
    write_deltalake(uri, ROW, configuration=props)
    stale = DeltaTable(uri)
    for i in range(1, commits + 1):
        txn = CommitProperties(app_transactions=[Transaction("app", i)])
        write_deltalake(uri, ROW, mode="append", commit_properties=txn)
    newest = DeltaTable(uri)
    newest.create_checkpoint()
    time.sleep(0.01)
    newest.cleanup_metadata()
    assert not (Path(uri) / "_delta_log" / f"{0:020d}.json").exists()
    return stale


def test_a_stale_snapshot_fails_and_read_txn_survives(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    stale = _cleaned_table(uri, 5)
    with pytest.raises(DeltaError) as info:  # what delta-rs does: the reason this module exists
        stale.transaction_version("app")
    assert log_entries_gone(info.value)
    assert read_txn(stale, "app") == 5
    assert stale.version() == 5  # brought to the newest version
    assert read_txn(stale, "other") is None


def test_state_reader_is_at_least_as_new_as_asked(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _cleaned_table(uri, 3)
    opened: list[int] = []

    def open_table() -> DeltaTable:
        dt = DeltaTable(uri)
        opened.append(dt.version())
        return dt

    reader = StateReader(open_table)
    assert reader.txn("app") == 3
    write_deltalake(
        uri, ROW, mode="append", commit_properties=CommitProperties(app_transactions=[Transaction("app", 9)])
    )
    assert reader.txn("app") == 3  # its own snapshot, not moved without a reason
    assert reader.txn("app", at_least=4) == 9  # a caller that saw version 4 never reads older state
    assert opened == [3]


def test_other_errors_are_not_taken_for_cleanup() -> None:
    assert not log_entries_gone(OSError("connection reset by peer"))
    assert log_entries_gone(
        DeltaError("Kernel error: File not found: /w/t/_delta_log/00000000000000000000.json")
    )
