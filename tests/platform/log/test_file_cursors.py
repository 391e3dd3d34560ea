"""File cursors: a big file read in small fetches gives back every row once, in order, from any offset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log.file_cursors import FileCursors
from topiclake.platform.log.file_index import DataFile
from topiclake.schemas import TOPIC_SCHEMA


def _file(tmp_path: Path, offsets: list[int], name: str = "f.parquet") -> DataFile:
    n = len(offsets)
    stored = pa.schema([f for f in TOPIC_SCHEMA if f.name not in ("partition", "segment")])
    cols = {
        "key": [None] * n,
        "value": [b"v%d" % o for o in offsets],
        "topic": ["t"] * n,
        "offset": offsets,
        "timestamp": [o * 1000 for o in offsets],
        "timestampType": [0] * n,
        "headers": [None] * n,
        "producer_id": [None] * n,
        "producer_epoch": [None] * n,
        "sequence": [None] * n,
    }
    table = pa.table({f.name: pa.array(cols[f.name], f.type) for f in stored})
    path = tmp_path / name
    pq.write_table(table, path)
    return DataFile(str(path), 2, 0, min(offsets), max(offsets), n, path.stat().st_size, None, 0)


def _walk(cursors: FileCursors, f: DataFile, start: int, max_records: int, max_bytes: int) -> list[int]:
    fs = pafs.LocalFileSystem()
    seen: list[int] = []
    offset = start
    while offset <= f.max_offset:
        rows = cursors.read(fs, f, offset, max_records, max_bytes)
        assert rows is not None and rows.num_rows > 0
        assert rows.schema == TOPIC_SCHEMA and set(rows["partition"].to_pylist()) == {2}
        seen += rows["offset"].to_pylist()
        offset = seen[-1] + 1
    return seen


def test_small_fetches_walk_the_file_once_in_order(tmp_path: Path) -> None:
    offsets = [o for o in range(30_000) if o % 5 != 3]  # gaps, as key compaction leaves them
    f = _file(tmp_path, offsets)
    cursors = FileCursors()
    assert _walk(cursors, f, 0, 700, 1 << 30) == offsets
    assert _walk(cursors, f, 20_001, 100_000, 4096) == [o for o in offsets if o >= 20_001]
    small = _file(tmp_path, offsets[:300], "small.parquet")
    assert _walk(cursors, small, 3, 1, 1) == [o for o in offsets[:300] if o >= 3]


def test_a_record_larger_than_max_bytes_still_comes_back(tmp_path: Path) -> None:
    f = _file(tmp_path, list(range(10)))
    rows = FileCursors().read(pafs.LocalFileSystem(), f, 4, 100, 1)
    assert rows is not None and rows["offset"].to_pylist() == [4]


def test_a_file_out_of_offset_order_is_left_to_the_other_reader(tmp_path: Path) -> None:
    f = _file(tmp_path, [5, 3, 4, 6])
    assert FileCursors().read(pafs.LocalFileSystem(), f, 0, 100, 1 << 20) is None


def test_cursors_are_bounded(tmp_path: Path) -> None:
    cursors = FileCursors(max_cursors=2)
    files = [_file(tmp_path, list(range(100)), f"f{i}.parquet") for i in range(5)]
    for f in files:
        assert cursors.read(pafs.LocalFileSystem(), f, 0, 10, 1 << 20) is not None
    assert len(cursors._parked) == 2


def test_a_fetch_cut_short_goes_on_inside_the_rows_last_read(tmp_path: Path) -> None:
    offsets = list(range(0, 40_000, 2))
    f = _file(tmp_path, offsets)
    fs = pafs.LocalFileSystem()
    cursors = FileCursors()
    first = cursors.read(fs, f, 0, 5000, 1 << 30)
    assert first is not None and first["offset"].to_pylist() == offsets[:5000]
    (cursor,) = cursors._parked.values()
    again = cursors.read(fs, f, 4001, 3000, 1 << 30)  # the Kafka answer held only offsets below 4001
    assert again is not None and again["offset"].to_pylist() == [o for o in offsets if o >= 4001][:3000]
    assert list(cursors._parked.values()) == [cursor]  # the same cursor: nothing decoded again


def test_a_fetch_reaching_a_big_files_end_goes_on_into_the_next_files(tmp_path: Path) -> None:
    """With no small-file cache every file is read by a cursor; one fetch spans up to 8 of them."""
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(maintenance=False, tail_cache_bytes=0, linger_ms=0)) as broker:
        broker.create_topic("b", partitions=1)
        for i in range(12):  # one file per commit, 50 records each
            broker.produce("b", [Record(value=b"%d" % (i * 50 + j)) for j in range(50)], acks="all")
    with Broker(storage, BrokerConfig(maintenance=False, tail_cache_bytes=0, read_cache_bytes=0)) as broker:
        whole = broker.fetch("b", 0, 0, max_records=10_000, max_bytes=1 << 30).records
        assert whole["offset"].to_pylist() == list(range(400))  # eight files, not one
        assert whole["value"].to_pylist() == [b"%d" % o for o in range(400)]
        inside = broker.fetch("b", 0, 75, max_records=100, max_bytes=1 << 30).records
        assert inside["offset"].to_pylist() == list(range(75, 175))  # across two file ends
        rest = broker.fetch("b", 0, 175, max_records=10_000, max_bytes=1 << 30).records
        assert rest["offset"].to_pylist() == list(range(175, 550))  # files 3 to 10
        small = broker.fetch("b", 0, 0, max_records=10_000, max_bytes=1).records
        assert small["offset"].to_pylist() == [0]  # the byte limit holds: no file read beyond it
