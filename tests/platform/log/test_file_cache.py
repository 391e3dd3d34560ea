"""The broker's small-file cache: re-reads of history come from memory, identical to reads from disk,
within its byte bound."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.platform.log.file_index import build_index, read_files


def _many_files(tmp_path: Path, n: int) -> tuple[Storage, str]:
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(maintenance=False, tail_cache_bytes=0, linger_ms=0)
    with Broker(storage, config) as broker:
        broker.create_topic("h", partitions=1)
        for i in range(n):
            broker.produce("h", [Record(key=str(i).encode(), value=b"v" * i)], acks="all")
    return storage, storage.topic_uri("h")


def test_cached_reads_equal_disk_reads_and_hit(tmp_path: Path) -> None:
    storage, uri = _many_files(tmp_path, 60)
    fs = storage.filesystem(uri)
    files = build_index(DeltaTable(uri), fs).files(0)
    assert len(files) == 60
    cache = SmallFileCache(16 << 20)
    for start in (0, 17, 59):
        disk = read_files(fs, files, start)
        assert read_files(fs, files, start, cache).equals(disk)  # first: a miss for every file not kept
        assert read_files(fs, files, start, cache).equals(disk)  # then: from memory
        assert disk["offset"].to_pylist() == list(range(start, 60))
    assert cache.misses == 60 and cache.hits >= 60 * 5 - 60


def test_the_cache_stays_within_its_bound(tmp_path: Path) -> None:
    storage, uri = _many_files(tmp_path, 40)
    fs = storage.filesystem(uri)
    files = build_index(DeltaTable(uri), fs).files(0)
    one = read_files(fs, files[:1], 0, SmallFileCache(1 << 20)).nbytes
    cache = SmallFileCache(one * 10)
    table = read_files(fs, files, 0, cache)
    assert table["offset"].to_pylist() == list(range(40))
    assert cache.nbytes <= one * 10
    assert SmallFileCache(0).keeps(1) is False  # 0 turns it off


def test_broker_fetches_of_history_use_the_cache(tmp_path: Path) -> None:
    storage, _ = _many_files(tmp_path, 30)
    config = BrokerConfig(maintenance=False, tail_cache_bytes=0)
    with Broker(storage, config) as broker:
        first = broker.fetch("h", 0, 0, max_records=1000).records
        hits = broker.file_cache.hits
        again = broker.fetch("h", 0, 0, max_records=1000).records
        assert broker.file_cache.hits >= hits + 30
        assert again.equals(first) and first.num_rows == 30
        assert first["value"].to_pylist() == [b"v" * i for i in range(30)]
        assert isinstance(first, pa.Table)


def test_a_cold_fetch_decodes_the_files_its_byte_limit_needs_not_all(tmp_path: Path) -> None:
    """Small files of well-compressed records: the window is bounded by their records too, not only by
    their size on disk (which let a cold 1 MiB fetch decode ~80,000 records to answer ~6,000)."""
    storage, _ = _many_files(tmp_path, 60)
    with Broker(storage, BrokerConfig(maintenance=False, tail_cache_bytes=0)) as broker:
        rows = broker.fetch("h", 0, 0, max_records=1000, max_bytes=48 * 10).records
        assert rows.num_rows >= 1 and rows["offset"].to_pylist() == list(range(rows.num_rows))
        assert broker.file_cache.misses <= 11  # ten records' worth of files (and one more), not sixty
        rest = broker.fetch("h", 0, rows.num_rows, max_records=1000, max_bytes=1 << 20).records
        assert rest["offset"].to_pylist() == list(range(rows.num_rows, 60))
