"""The offsets store over a real Delta table: group commit, recovery, compaction, fencing, deletion."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from topiclake.platform import Storage
from topiclake.platform.groups.offsets_store import OffsetsStore
from topiclake.schemas.offsets import OFFSETS_SCHEMA


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "wh"))


def test_commit_is_durable_and_table_has_documented_schema(storage: Storage) -> None:
    store = OffsetsStore(storage)
    store.commit("g", {("t", 0): (5, "meta"), ("t", 1): (7, "")}, member_id="m-1", generation=3)
    store.close()
    dt = DeltaTable(storage.system_uri("consumer_offsets"))
    assert dt.schema().to_arrow() == OFFSETS_SCHEMA or pa.schema(dt.schema().to_arrow()).equals(
        OFFSETS_SCHEMA
    )
    rows = sorted(dt.to_pyarrow_table().to_pylist(), key=lambda r: r["partition"])
    assert [(r["group"], r["topic"], r["partition"], r["committed_offset"]) for r in rows] == [
        ("g", "t", 0, 5),
        ("g", "t", 1, 7),
    ]
    assert rows[0]["metadata"] == "meta" and rows[0]["member_id"] == "m-1" and rows[0]["generation"] == 3
    assert rows[0]["commit_timestamp"] is not None


def test_recovered_after_restart_newest_row_wins(storage: Storage) -> None:
    store = OffsetsStore(storage)
    for offset in (1, 2, 3):
        store.commit("g", {("t", 0): (offset, f"v{offset}")})
    store.commit("h", {("t", 0): (9, "")})
    store.close()
    again = OffsetsStore(storage)
    try:
        got = again.get("g", "t", 0)
        assert got is not None and got.offset == 3 and got.metadata == "v3"
        assert again.groups() == {"g", "h"}
        again.commit("g", {("t", 0): (4, "")})
        got = again.get("g", "t", 0)
        assert got is not None and got.offset == 4
    finally:
        again.close()


def test_concurrent_commits_from_8_threads_all_land_in_few_delta_commits(storage: Storage) -> None:
    store = OffsetsStore(storage, linger_ms=5)
    errors: list[BaseException] = []

    def worker(p: int) -> None:
        try:
            for i in range(1, 11):
                store.commit("g", {("t", p): (i * 10 + p, "")})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {tp: c.offset for tp, c in store.committed("g").items()} == {("t", p): 100 + p for p in range(8)}
    assert store.stats()["commits"] < 80  # batched
    store.close()
    again = OffsetsStore(storage)
    assert {tp: c.offset for tp, c in again.committed("g").items()} == {("t", p): 100 + p for p in range(8)}
    again.close()


def test_table_stays_small_after_many_commits(storage: Storage) -> None:
    store = OffsetsStore(storage, linger_ms=0, compact_after=40)
    for i in range(300):
        store.commit("g", {("t", i % 4): (i, "")})
    stats = store.stats()
    assert stats["compactions"] >= 5
    store.close()
    rows = DeltaTable(storage.system_uri("consumer_offsets")).to_pyarrow_table().num_rows
    assert rows <= 40 + 4
    again = OffsetsStore(storage)
    assert {tp: c.offset for tp, c in again.committed("g").items()} == {("t", p): 296 + p for p in range(4)}
    again.close()


def test_delete_group_removes_only_its_rows(storage: Storage) -> None:
    store = OffsetsStore(storage)
    store.commit("g", {("t", 0): (1, ""), ("t", 1): (2, "")})
    store.commit("keep", {("t", 0): (3, "")})
    assert store.delete_group("g") == 2
    assert store.delete_group("g") == 0
    store.close()
    table = DeltaTable(storage.system_uri("consumer_offsets")).to_pyarrow_table()
    assert table["group"].to_pylist() == ["keep"]
    again = OffsetsStore(storage)
    assert again.groups() == {"keep"}
    again.close()


def test_a_concurrent_writer_is_fenced_and_no_commit_is_lost(storage: Storage) -> None:
    store = OffsetsStore(storage)
    store.commit("g", {("t", 0): (1, "")})
    # Another writer (e.g. another broker's store) commits behind this store's back, with the same fence.
    other = OffsetsStore(storage)
    other.commit("g", {("t", 1): (5, "")})
    other.close()
    store.commit("g", {("t", 2): (7, "")})  # first attempt conflicts, re-reads, commits again
    assert {tp: c.offset for tp, c in store.committed("g").items()} == {("t", 0): 1, ("t", 1): 5, ("t", 2): 7}
    store.compact()
    store.close()
    again = OffsetsStore(storage)
    assert {tp: c.offset for tp, c in again.committed("g").items()} == {("t", 0): 1, ("t", 1): 5, ("t", 2): 7}
    again.close()


def test_foreign_append_without_fence_is_still_read(storage: Storage) -> None:
    store = OffsetsStore(storage)
    store.close()
    row = {
        "group": "spark",
        "topic": "t",
        "partition": 0,
        "committed_offset": 4,
        "metadata": None,
        "commit_timestamp": None,
        "member_id": None,
        "generation": None,
        "commit_seq": 1,
    }
    write_deltalake(
        storage.system_uri("consumer_offsets"), pa.Table.from_pylist([row], OFFSETS_SCHEMA), mode="append"
    )
    again = OffsetsStore(storage)
    got = again.get("spark", "t", 0)
    assert got is not None and got.offset == 4 and got.generation == -1
    again.close()
