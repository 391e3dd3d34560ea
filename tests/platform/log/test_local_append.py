"""The local append path (platform/log/fast_append.py): log entries delta-rs reads as its own, version races
lost to other writers, a stale writer after cleanup, and compaction's local commit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log._commit import LogCommits
from topiclake.platform.log._local_compaction import commit_rewrite
from topiclake.platform.log.commit_files import split
from topiclake.platform.log.fast_append import SMALL_FILE_ROWS, LocalAppender, LostRace, encode, file_stats
from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.platform.log.file_cursors import FileCursors
from topiclake.platform.log.file_index import build_index, read_file, read_files
from topiclake.platform.log.tail_cache import UNBOUNDED, TailCache

QUIET = {"maintenance_interval_ms": 60_000}  # maintenance on (the local path needs it), idle in the test


def _entry(uri: str, version: int) -> list[dict[str, object]]:
    text = Path(uri, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def _written(folder: Path) -> set[str]:
    """The data files in ``folder`` that hold something (spare files are empty: spare_files.py)."""
    return {p.name for p in folder.iterdir() if p.stat().st_size > 0}


def _offsets(uri: str, partition: int) -> list[int]:
    table = DeltaTable(uri).to_pyarrow_table()
    table = table.filter(pc.equal(table["partition"], partition))
    return sorted(table["offset"].to_pylist())


def test_a_local_commit_is_a_delta_commit_delta_rs_reads(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        assert log._fast is not None, "a local warehouse with maintenance on commits locally"
        records = [Record(key=f"k{i}".encode(), value=b"v" * i, headers=[("h", b"x")]) for i in range(50)]
        results = broker.produce("t", records, acks="all")
        assert all(r.error is None for r in results)
        version = log.known_version()
        assert log._dt.version() < version, "the commit did not go through delta-rs"
        actions = _entry(log.uri, version)
        info = actions[0]["commitInfo"]
        assert isinstance(info, dict) and info["operation"] == "WRITE" and info["isBlindAppend"] is True
        adds = [a["add"] for a in actions if "add" in a]
        txns = {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}  # type: ignore[index]
        ends = {p: log.high_watermark(p) for p in range(2)}
        assert txns == {f"topiclake/hwm/t/{p}": end for p, end in ends.items() if end}
        for add in adds:
            assert isinstance(add, dict)
            # Parquet without partition columns, stats as delta-rs computes them from the rows
            stored = pq.read_table(os.path.join(log.uri, str(add["path"])))
            assert "partition" not in stored.column_names and "segment" not in stored.column_names
            stats = json.loads(str(add["stats"]))
            assert stats["numRecords"] == stored.num_rows
            assert stats["minValues"]["offset"] == pc.min(stored["offset"]).as_py()
            assert stats["maxValues"]["offset"] == pc.max(stored["offset"]).as_py()
    dt = DeltaTable(storage.topic_uri("t"))
    assert dt.version() == version
    table = dt.to_pyarrow_table()
    assert table.num_rows == 50
    by_key = {
        k.decode(): v for k, v in zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)
    }
    assert by_key == {f"k{i}": b"v" * i for i in range(50)}
    index = build_index(dt, storage.filesystem(storage.topic_uri("t")))  # min/max offsets from our stats
    assert sum(f.num_records for p in index.partitions() for f in index.files(p)) == 50


def test_stats_match_what_delta_rs_writes_for_the_same_rows(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"a"), Record(value=b"b")], acks="all")
        rows = broker.fetch("t", 0, 0, max_records=10).records
    ours = file_stats(rows)
    raw = str(tmp_path / "raw")
    write_deltalake(raw, rows, partition_by=["partition", "segment"])
    theirs = json.loads(str(_entry(raw, 0)[-1]["add"]["stats"]))  # type: ignore[index]
    assert ours["numRecords"] == theirs["numRecords"]
    for kind in ("minValues", "maxValues", "nullCount"):
        mine = ours[kind]
        assert isinstance(mine, dict)
        assert {k: v for k, v in theirs[kind].items() if k in mine} == mine, kind


def test_a_commit_over_many_partitions_writes_each_files_stats_as_delta_rs(tmp_path: Path) -> None:
    """One commit of keyed records over 12 partitions: a file per partition, whose statistics (computed
    for all partitions at once) are delta-rs's for the same rows, and idempotent producers' columns too."""
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(linger_ms=50, **QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=12)
        broker.produce("t", [Record(key=f"k{i}".encode(), value=b"v" * i) for i in range(200)], acks="all")
        uri = storage.topic_uri("t")
        adds = [a["add"] for a in _entry(uri, DeltaTable(uri).version()) if "add" in a]
        rows = pa.concat_tables([broker.fetch("t", p, 0, max_records=1000).records for p in range(12)])
    assert len(adds) == 12  # one file per partition
    raw = str(tmp_path / "raw")
    write_deltalake(raw, rows, partition_by=["partition", "segment"])
    theirs = {
        add["add"]["partitionValues"]["partition"]: json.loads(add["add"]["stats"])  # type: ignore[index]
        for add in _entry(raw, 0)
        if "add" in add
    }
    for add in adds:
        ours = json.loads(str(add["stats"]))  # type: ignore[index]
        want = theirs[add["partitionValues"]["partition"]]  # type: ignore[index]
        assert ours["numRecords"] == want["numRecords"] > 0
        for kind in ("minValues", "maxValues", "nullCount"):
            assert {k: v for k, v in want[kind].items() if k in ours[kind]} == ours[kind], kind
            assert {"offset", "timestamp"} <= ours[kind].keys()


def test_small_files_skip_dictionaries_and_keep_offset_and_timestamp_statistics(tmp_path: Path) -> None:
    """An append's small file: no dictionary pages, Parquet statistics of offset and timestamp only, no
    stored Arrow schema (the cheaper encode); a file of SMALL_FILE_ROWS rows or more (a compaction's) keeps
    pyarrow's defaults. Both read back as the rows written (the timestamp as UTC microseconds)."""
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(key=b"k", value=str(i).encode()) for i in range(SMALL_FILE_ROWS)])
        rows = broker.fetch("t", 0, 0, max_records=SMALL_FILE_ROWS).records
    for table, small in ((rows.slice(0, 3), True), (rows, False)):
        meta = pq.read_metadata(pa.BufferReader(encode(table))).row_group(0)
        columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
        with_stats = {name for name, col in columns.items() if col.is_stats_set}
        dictionary = {name for name, col in columns.items() if col.has_dictionary_page}
        stored_schema = b"ARROW:schema" in (pq.read_metadata(pa.BufferReader(encode(table))).metadata or {})
        assert stored_schema != small
        if small:
            assert with_stats == {"offset", "timestamp"} and not dictionary, (with_stats, dictionary)
        else:
            assert {"offset", "timestamp", "key", "value"} <= with_stats and "value" in dictionary
        back = pq.read_table(pa.BufferReader(encode(table)))
        stored = table.drop_columns(["partition", "segment"])
        if small:  # the columns it holds only nulls in are left out (plain records: headers, producer)
            nulls = ["headers", "producer_id", "producer_epoch", "sequence"]
            assert back.column_names == stored.drop_columns(nulls).column_names
            stored = stored.drop_columns(nulls)
        assert back.equals(stored), small


def test_columns_a_small_file_leaves_out_are_read_as_nulls_by_every_reader(tmp_path: Path) -> None:
    """Small files leave out the nullable columns they hold only nulls in (a few records of a plain
    producer: no headers, no producer id; unkeyed: no key); a file with one header keeps the column. delta-rs
    (pyarrow dataset and DataFusion), the broker's fetch from files (cached or not, one file or many)
    and the file cursors all read the table's columns, the missing ones as nulls."""
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(linger_ms=0, **QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"a"), Record(value=b"b")], acks="all")  # no key, no headers
        broker.produce("t", [Record(key=b"k", value=b"c", headers=[("h", b"x")])], acks="all")
        uri = storage.topic_uri("t")
        expected = broker.fetch("t", 0, 0, max_records=10).records  # from the tail cache
    dt = DeltaTable(uri)
    fs = storage.filesystem(uri)
    files = build_index(dt, fs).files(0)
    assert len(files) == 2
    first, second = (set(pq.read_schema(fs.open_input_file(f.path)).names) for f in files)
    assert not first & {"key", "headers", "producer_id", "producer_epoch", "sequence"}, first
    assert {"key", "headers"} <= second and "producer_id" not in second, second
    assert expected.num_rows == 3
    assert expected["headers"].to_pylist() == [None, None, [{"key": "h", "value": b"x"}]]
    assert read_files(fs, files, 0).equals(expected)
    assert read_files(fs, files, 0, SmallFileCache(1 << 20)).equals(expected)
    assert pa.concat_tables([read_file(fs, f) for f in files]).equals(expected)
    cursors = FileCursors()
    read = [cursors.read(fs, f, f.min_offset, 10, 1 << 20) for f in files]
    assert pa.concat_tables([r for r in read if r is not None]).equals(expected)
    by_delta_rs = dt.to_pyarrow_table().sort_by("offset")
    assert by_delta_rs.select(expected.column_names).cast(expected.schema).equals(expected)
    sql = QueryBuilder().register("t", dt).execute("select key, headers, producer_id from t order by offset")
    got = pa.table(sql.read_all())
    assert got["key"].to_pylist() == [None, None, b"k"] and got["producer_id"].null_count == 3


def test_a_version_lost_to_another_writer_is_retried_at_the_next(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"first")], acks="all")
        log = broker.log("t")
        before = log.known_version()
        # another writer (no txn of ours: like a retention or compaction commit) takes the next version
        foreign = DeltaTable(log.uri)
        empty = foreign.to_pyarrow_table().schema.empty_table()
        write_deltalake(foreign, empty, mode="append")
        assert foreign.version() == before + 1
        results = broker.produce("t", [Record(value=b"second")], acks="all")
        assert results[0].error is None and results[0].offset == 1
        assert log.known_version() == before + 2
        assert _offsets(log.uri, 0) == [0, 1]


def test_a_stale_writer_catches_up_when_a_checkpoint_passed_it(tmp_path: Path) -> None:
    """Entries after our version cleaned up behind a newer checkpoint: linking at version + 1 would then
    succeed on a table that moved on, so the appender must see it is stale."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("v", pa.int64())])
    write_deltalake(
        uri,
        pa.table({"v": [0]}, schema=schema),
        configuration={"delta.logRetentionDuration": "interval 0 seconds"},
    )
    appender = LocalAppender(uri, 0)
    dt = DeltaTable(uri)
    for i in range(1, 12):
        write_deltalake(dt, pa.table({"v": [i]}, schema=schema), mode="append")
    assert not appender.stale()  # no checkpoint yet: every version after 0 still has its entry
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert not Path(uri, "_delta_log", f"{1:020d}.json").exists()
    assert appender.stale()
    appender.version = dt.version()
    assert not appender.stale()


def test_losing_a_race_reports_what_the_winners_wrote(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("v", pa.int64())])
    write_deltalake(uri, pa.table({"v": [0]}, schema=schema))
    appender = LocalAppender(uri, 0)
    dt = DeltaTable(uri)
    write_deltalake(dt, pa.table({"v": [1]}, schema=schema), mode="overwrite")  # removes the first file
    try:
        appender.commit([{"commitInfo": {"operation": "WRITE"}}])
        raise AssertionError("version 1 was taken")
    except LostRace as race:
        assert race.winners.versions == [1]
        assert race.winners.removed, "the overwrite's remove is reported"
    assert appender.version == 1
    assert appender.commit([{"commitInfo": {"operation": "WRITE"}}]) == 2


def test_local_compaction_rewrites_without_data_change_and_yields_to_a_removal(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**QUIET)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=1)
        for i in range(10):
            broker.produce("t", [Record(value=str(i).encode())], acks="all")
        log = broker.log("t")
        uri = log.uri
    dt = DeltaTable(uri)
    fs = storage.filesystem(uri)
    files = build_index(dt, fs).files(0)
    assert len(files) == 10
    data = read_files(fs, files, 0)
    assert commit_rewrite(uri, dt.version(), files, data)
    after = DeltaTable(uri)
    assert after.history(1)[0]["operation"] == "OPTIMIZE"
    actions = _entry(uri, after.version())
    assert all(a[kind]["dataChange"] is False for a in actions for kind in ("add", "remove") if kind in a)  # type: ignore[index]
    assert len(after.file_uris()) == 1 and _offsets(uri, 0) == list(range(10))
    # a second rewrite of the same (now removed) files, from the old snapshot: dropped, nothing left behind
    before_files = _written(Path(uri, "partition=0", "segment=0"))
    assert not commit_rewrite(uri, dt.version(), files, data)
    assert _written(Path(uri, "partition=0", "segment=0")) == before_files
    assert _offsets(uri, 0) == list(range(10))


@pytest.mark.parametrize("local_append", [True, False], ids=["local-append", "delta-rs"])
def test_commits_are_counted_with_their_latency_and_records_on_either_path(
    tmp_path: Path, local_append: bool
) -> None:
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(local_append=local_append, linger_ms=0, **QUIET)  # type: ignore[arg-type]
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=1)
        for i in range(3):  # acks=all one after the other: one commit each
            broker.produce("t", [Record(value=b"a"), Record(value=str(i).encode())], acks="all")
        log = broker.log("t")
        assert (log._fast is not None) == local_append
        times = log.commit_times
    assert times.commits == 3 and times.records == 6, times
    assert times.counts[-1] == 3 and times.counts == sorted(times.counts), times
    assert times.sum_ms > 0
    assert len(times.counts) == len(times.BOUNDS_MS) + 1


def test_a_many_partition_commit_fills_each_tail_with_its_files_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits over 12 partitions hand their files' rows to the partitions' tail caches (zero-copy slices
    of one table, not each partition's request batches joined): every partition's tail then holds exactly
    what its files hold, and compaction takes its runs from there (no file read back)."""

    def joined(*args: object) -> None:
        raise AssertionError("a local commit's rows were joined per partition")

    monkeypatch.setattr(LogCommits, "_add_to_tails", joined)
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(linger_ms=0, maintenance_interval_ms=20, compact_min_files=4)
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=12)
        for i in range(12):  # 12 commits of 40 keyed records: every partition gets rows in most of them
            broker.produce("t", [Record(key=f"k{i}-{j}".encode(), value=b"v%d" % j) for j in range(40)])
        log = broker.log("t")
        tails = {p: log._parts[p].tail.read(0, 1000, 1 << 30) for p in range(12)}
        deadline = time.monotonic() + 20
        while log.maintainer.stats.compactions == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = log.maintainer.stats
        uri = log.uri
    # every run from the tails but one or two: the maintainer takes the appender's log entries as they are
    # written, and a round that starts between a commit's entry and its rows reaching the tails reads that
    # run's files back (a correct fallback; 1 of 20 runs in 2 of 6 loaded runs)
    assert stats.compactions > 0 and stats.runs_from_memory >= stats.compactions - 2, stats
    table = DeltaTable(uri).to_pyarrow_table()
    assert table.num_rows == 480
    for p, tail in tails.items():
        rows = table.filter(pc.equal(table["partition"], p)).sort_by("offset")
        assert tail is not None and tail["offset"].to_pylist() == list(range(rows.num_rows)), p
        assert tail.select(["key", "value", "segment"]).equals(rows.select(["key", "value", "segment"])), p


def test_a_tail_read_without_a_byte_limit_reads_what_a_limited_read_does() -> None:
    """Compaction reads a run's records from the tail with no byte limit (UNBOUNDED: no piece is sized; a
    sliced table's ``nbytes`` walks every chunk, ~190 us a run on 12 partitions): the same rows as a read
    with a limit they fit in, ``max_records`` still bounding it; a real limit still cuts the read."""
    tail = TailCache(1 << 30)
    for i in range(20):  # 20 small commits: one merged entry of many chunks
        offsets = pa.array(range(3 * i, 3 * i + 3), pa.int64())
        tail.add(3 * i, pa.table({"offset": offsets, "value": pa.array([b"v" * 100] * 3)}), 400)
    limited = tail.read(5, 40, 1 << 30)
    assert limited is not None and limited["offset"].to_pylist() == list(range(5, 45))
    unbounded = tail.read(5, 40, UNBOUNDED)
    assert unbounded is not None and unbounded.equals(limited)
    cut = tail.read(5, 40, 1_000)
    assert cut is not None and 0 < cut.num_rows < 40


def test_rows_already_grouped_split_into_the_same_files_without_a_take() -> None:
    """A local commit builds its table partition by partition, so split() takes its runs where they stand;
    the rows of each (partition, segment) are those the general path (sort and take) gives, in order."""
    parts = [3, 0, 3, 1, 0, 3, 1, 2]
    segs = [0, 0, 5, 0, 0, 5, 0, 0]
    mixed = pa.table(
        {
            "partition": pa.array(parts, pa.int32()),
            "segment": pa.array(segs, pa.int64()),
            "offset": pa.array(range(8), pa.int64()),
        }
    )
    grouped = mixed.sort_by([("partition", "ascending"), ("segment", "ascending"), ("offset", "ascending")])
    fast, general = split(grouped), split(mixed)
    assert fast.table is grouped  # no take: the groups are slices of the table itself
    assert fast.keys == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 5)] and fast.counts == [2, 2, 1, 1, 2]
    assert dict(fast.groups()).keys() == dict(general.groups()).keys()
    for key, rows in general.groups():
        assert dict(fast.groups())[key].equals(rows), key
