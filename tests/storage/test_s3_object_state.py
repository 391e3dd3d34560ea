"""Maintenance on S3 from the table state the broker keeps of its own log entries
(platform/log/object_state.py): compaction, checkpoints and log cleanup without reading the log back, the
checkpoints ours and read by delta-rs (files, ``txn`` ids, tombstones), a new broker starting from them."""

from __future__ import annotations

import time
from urllib.parse import unquote

import orjson
import pyarrow as pa
from _s3_checks import check_acked, check_log, table_rows
from deltalake import DeltaTable
from s3_harness import S3Warehouse

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log._base import partition_app_id
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.log.object_state import ObjectTableState
from topiclake.platform.log.partition_offsets import recorded_partition_offsets

CONFIG = BrokerConfig(
    linger_ms=0, compact_min_files=4, checkpoint_interval=8, maintenance_interval_ms=100, log_retention_ms=0
)


def _produce(broker: Broker, n: int, tag: str, acked: dict[str, tuple[int, int]]) -> None:
    for i in range(n):
        values = [f"{tag}{i}-p{p}" for p in (0, 1)]
        records = [Record(value=v.encode(), partition=p) for p, v in enumerate(values)]
        for v, r in zip(values, broker.produce("t", records), strict=True):
            assert r.error is None, r
            acked[v] = (r.partition, r.offset)  # type: ignore[assignment]


def test_maintenance_keeps_state_from_the_appender_and_writes_checkpoints(s3: S3Warehouse) -> None:
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    with Broker(storage, CONFIG) as broker:
        broker.create_topic("t", partitions=2)
        log = broker.log("t")
        assert isinstance(log._fast, ObjectAppender)
        stats = log.maintainer.stats
        _produce(broker, 4, "a", acked)  # the state is seeded from the log in the first rounds
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stats.checkpoints < 1:
            _produce(broker, 1, f"w{time.monotonic()}", acked)
        s3.proxy.record()
        _produce(broker, 30, "b", acked)
        deadline = time.monotonic() + 30  # the rounds catch up with the last commits
        while log.known_version() - stats.last_checkpoint_version >= CONFIG.checkpoint_interval:
            assert time.monotonic() < deadline, stats
            time.sleep(0.1)
        requests = s3.proxy.requests()
        s3.proxy.record(False)
        assert stats.failures == 0 and stats.compactions >= 2 and stats.checkpoints >= 3, stats
        log_reads = [
            r
            for r in requests
            if r[1] in ("GET", "LIST") and "/topics/t/" in r[3] and not r[3].endswith("_last_checkpoint")
        ]
        # the steady rounds read nothing of the topic's log or files: the state came from the appender
        # (the flusher's appender reads _last_checkpoint each ``log_retention_ms / 2``: 0 here)
        assert not log_reads, log_reads[:10]
        deletes = [r for r in requests if r[1] == "DELETE" and "_delta_log/" in r[3]]
        assert deletes, "log entries older than the checkpoint are cleaned by key"
        assert any(r[1] == "PUT" and r[3].endswith(".checkpoint.parquet") for r in requests)
        state = log.maintainer._state
        assert state is not None
        ours = state[0]
        checkpoint = ours.checkpoint_version
        hwms = {p: 1 + max(o for q, o in acked.values() if q == p) for p in (0, 1)}
    # delta-rs reads the table from our checkpoint: files, txn ids and rows as acknowledged
    uri = storage.topic_uri("t")
    dt = DeltaTable(uri, storage_options=storage.options())
    assert dt.version() >= checkpoint
    first_entry = dt.history()[-1]["version"]
    assert first_entry > 0, "old log entries were deleted: the table opens from the checkpoint alone"
    at_checkpoint = DeltaTable(uri, version=checkpoint, storage_options=storage.options())
    paths = set(pa.table(at_checkpoint.get_add_actions(flatten=True))["path"].to_pylist())
    assert paths == set(ours.adds) or dt.version() > checkpoint
    for p in (0, 1):
        assert dt.transaction_version(partition_app_id("t", p)) == hwms[p]
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked)
    # a state seeded from that checkpoint (as a new broker's) holds the same live files and txn ids
    with Broker(storage, CONFIG) as broker:
        fresh = ObjectTableState(broker.log("t")._fast.client, "topics/t")  # type: ignore[union-attr]
        fresh.seed()
        assert set(fresh.adds) == set(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist())
        assert fresh.txn_version(partition_app_id("t", 0)) == hwms[0]
        assert fresh.gets <= dt.version() - checkpoint + 2  # the checkpoint and each entry once, no more
        more: dict[str, tuple[int, int]] = {}
        _produce(broker, 3, "c", more)
        assert more["c0-p0"] == (0, hwms[0]) and more["c0-p1"] == (1, hwms[1])
    hint = orjson.loads(s3_object(s3, "topics/t/_delta_log/_last_checkpoint"))
    assert hint["version"] >= checkpoint and hint["numOfAddFiles"] >= 1


def s3_object(s3: S3Warehouse, key: str) -> bytes:
    """An object of the warehouse, read through the broker's own client."""
    from topiclake.platform.storage.s3_client import S3Client, s3_location

    location = s3_location(s3.uri, s3.options)
    assert location is not None
    client = S3Client(location)
    try:
        body = client.get(key)
    finally:
        client.close()
    assert body is not None
    return body


def test_state_seeds_from_a_checkpoint_delta_rs_wrote(s3: S3Warehouse) -> None:
    """A table checkpointed by delta-rs (before this broker, or by a Spark job's vacuum): the state reads
    its checkpoint and the entries after it to the same live files and ``txn`` ids delta-rs sees."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from topiclake.platform.storage.s3_client import S3Client, s3_location
    from topiclake.schemas import TOPIC_SCHEMA

    storage = Storage(s3.uri, s3.options)
    uri = storage.topic_uri("legacy")
    opts = storage.options()
    for i in range(4):
        rows = {name: [None] for name in TOPIC_SCHEMA.names}
        rows.update(value=[f"v{i}".encode()], partition=[i % 2], offset=[i // 2], segment=[0])
        txn = CommitProperties(app_transactions=[Transaction(f"app-{i % 2}", i)])
        write_deltalake(
            uri,
            pa.table(rows, schema=TOPIC_SCHEMA),
            mode="append",
            partition_by=["partition", "segment"],
            storage_options=opts,
            commit_properties=txn,
        )
        if i == 2:
            DeltaTable(uri, storage_options=opts).create_checkpoint()
    dt = DeltaTable(uri, storage_options=opts)
    location = s3_location(s3.uri, s3.options)
    assert location is not None
    client = S3Client(location)
    try:
        state = ObjectTableState(client, "topics/legacy")
        state.seed()
    finally:
        client.close()
    assert state.version == dt.version() == 3 and state.checkpoint_version == 2
    assert set(state.adds) == set(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist())
    assert {a: state.txn_version(a) for a in ("app-0", "app-1")} == {"app-0": 2, "app-1": 3}
    assert state.metadata["partitionColumns"] == ["partition", "segment"] and state.protocol
    index = state.index()
    assert [f.min_offset for f in index.files(0)] == [0, 1] and index.end_offset(1) == 2


def test_runs_not_held_in_memory_are_read_with_one_get_a_file(s3: S3Warehouse) -> None:
    """With no tail cache, compaction reads its runs back: one whole-object GET per file (pyarrow's
    filesystem sent a HEAD and ranged GETs per file), and every acknowledged record stays once."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    config = BrokerConfig(
        linger_ms=0,
        compact_min_files=4,
        checkpoint_interval=8,
        maintenance_interval_ms=100,
        tail_cache_bytes=0,
    )
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=2)
        stats = broker.log("t").maintainer.stats
        _produce(broker, 2, "a", acked)
        s3.proxy.record()
        deadline = time.monotonic() + 30
        n = 0
        while stats.compactions < 2:
            assert time.monotonic() < deadline, stats
            _produce(broker, 1, f"b{n}-", acked)
            n += 1
        requests = s3.proxy.requests()
        s3.proxy.record(False)
        assert stats.runs_from_memory == 0 and stats.failures == 0, stats
    data = [r for r in requests if r[3].endswith(".parquet") and "_delta_log" not in r[3]]
    assert [r for r in data if r[1] == "GET"], "the runs' files were read back"
    assert not [r for r in data if r[1] == "HEAD"], "no HEAD per file"
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked)


def test_runs_held_in_part_read_only_the_older_files(s3: S3Warehouse) -> None:
    """A tail cache holding only the newest files of a run: compaction GETs the older files alone and takes
    the rest from memory (issue 28: no GET of what the broker still holds); every acknowledged record
    stays once, in offset order."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    config = BrokerConfig(
        linger_ms=0,
        compact_min_files=4,
        checkpoint_interval=8,
        maintenance_interval_ms=100,
        tail_cache_bytes=700_000,  # ~4 of the commits below per partition (150 kB each: never merged)
    )
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=2)
        stats = broker.log("t").maintainer.stats
        s3.proxy.record()
        deadline = time.monotonic() + 30
        n = 0
        while stats.runs_partly_from_memory < 2:
            assert time.monotonic() < deadline, stats
            _produce(broker, 1, f"c{n}-{'x' * 150_000}-", acked)
            n += 1
        while stats.compactions < stats.runs_from_memory + stats.runs_partly_from_memory:  # committed
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        requests = s3.proxy.requests()
        s3.proxy.record(False)
        assert stats.failures == 0, stats
        read_back = stats.files_removed
    gets = [r for r in requests if r[1] == "GET" and r[3].endswith(".parquet") and "_delta_log" not in r[3]]
    assert gets, "the older files were read back"
    assert len(gets) < read_back, (len(gets), read_back)  # the newer ones came from memory
    rows = table_rows(storage, "t")
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked)


def test_partition_ends_recorded_from_the_state_without_reading_the_log(s3: S3Warehouse) -> None:
    """The partitions' ends in ``_system/partition_offsets`` come from the maintainer's table state (its
    ``txn`` ids and file index): recorded after a change, equal to the high watermarks, and no GET or LIST
    of the topic's log for them (a delta-rs handle was opened once a minute for this)."""
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    config = BrokerConfig(
        linger_ms=0, checkpoint_interval=1000, maintenance_interval_ms=100, offsets_history_ms=300
    )
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=2)
        info = broker.describe_topic("t")
        _produce(broker, 1, "a", acked)
        time.sleep(0.5)
        s3.proxy.record()
        _produce(broker, 3, "b", acked)
        deadline = time.monotonic() + 30
        while recorded_partition_offsets(storage).get((info.topic_id, 0)) != (0, 4):
            assert time.monotonic() < deadline, recorded_partition_offsets(storage)
            time.sleep(0.2)
        requests = s3.proxy.requests()
        s3.proxy.record(False)
    assert recorded_partition_offsets(storage)[(info.topic_id, 1)] == (0, 4)
    topic_log = [r for r in requests if "topics/t/_delta_log" in unquote(r[3]) and r[1] in ("GET", "LIST")]
    assert not topic_log, topic_log


def test_tombstones_kept_as_arrow_through_checkpoints(s3: S3Warehouse) -> None:
    """A busy table's tombstones (thousands of compacted files) go into each checkpoint without a Python
    row each: the state seeded from the checkpoint holds the unexpired ones, an expired one or a path added
    again is left out, and delta-rs opens the table from that checkpoint."""
    from deltalake import write_deltalake

    from topiclake.platform.storage.s3_client import S3Client, s3_location
    from topiclake.schemas import TOPIC_SCHEMA

    storage = Storage(s3.uri, s3.options)
    uri = storage.topic_uri("busy")
    opts = storage.options()
    for i in range(2):
        rows = {name: [None] for name in TOPIC_SCHEMA.names}
        rows.update(value=[f"v{i}".encode()], partition=[0], offset=[i], segment=[0])
        table = pa.table(rows, schema=TOPIC_SCHEMA)
        write_deltalake(
            uri, table, mode="append", partition_by=["partition", "segment"], storage_options=opts
        )
    now = int(time.time() * 1000)
    week = 7 * 24 * 3600 * 1000
    lines = [{"commitInfo": {"timestamp": now, "operation": "OPTIMIZE"}}]
    for i in range(3000):  # a week-old tombstone every third: past the default retention
        stamp = now - week - 1000 if i % 3 == 0 else now - i
        path = f"partition=0/segment=0/gone-{i}.parquet"
        lines.append({"remove": {"path": path, "deletionTimestamp": stamp, "dataChange": False, "size": 10}})
    lines.append({"remove": {"path": "partition=0/segment=0/again.parquet", "deletionTimestamp": now}})
    lines.append(
        {
            "add": {
                "path": "partition=0/segment=0/again.parquet",
                "partitionValues": {"partition": "0", "segment": "0"},
                "size": 1,
                "modificationTime": now,
                "dataChange": True,
            }
        }
    )
    location = s3_location(s3.uri, s3.options)
    assert location is not None
    client = S3Client(location)
    try:
        client.put("topics/busy/_delta_log/00000000000000000002.json", b"\n".join(map(orjson.dumps, lines)))
        state = ObjectTableState(client, "topics/busy")
        state.seed()
        assert state.version == 2 and len(state.tombstones) == 3000
        assert state.tombstones.any_between(now - 10_000, now) and not state.tombstones.any_between(
            now, now + 1
        )
        assert state.write_checkpoint() == 2
        fresh = ObjectTableState(client, "topics/busy")
        fresh.seed()
        hint = orjson.loads(client.get("topics/busy/_delta_log/_last_checkpoint") or b"{}")
    finally:
        client.close()
    kept = {f"partition=0/segment=0/gone-{i}.parquet" for i in range(3000) if i % 3}
    assert fresh.checkpoint_version == 2 and fresh.tombstones.paths() == kept == state.tombstones.paths()
    assert set(fresh.adds) == set(state.adds) and "partition=0/segment=0/again.parquet" in fresh.adds
    assert hint["size"] == 2 + len(state.adds) + len(kept)
    dt = DeltaTable(uri, storage_options=opts)
    assert dt.version() == 2
    assert set(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist()) == set(state.adds)


def test_compacted_files_are_vacuumed_once_their_tombstones_come_of_age(s3: S3Warehouse) -> None:
    """The vacuum on S3 runs when a tombstone (kept in Arrow form, _checkpoint_rows.py) came of age: the
    files compaction removed leave the bucket, the live ones and every record stay."""
    from pyarrow.fs import FileSelector

    config = BrokerConfig(
        linger_ms=0,
        compact_min_files=4,
        checkpoint_interval=8,
        maintenance_interval_ms=100,
        vacuum_interval_ms=2000,  # tombstones kept 4 s (two intervals): loaded rounds still meet them
        vacuum_retention_hours=0,
    )
    storage = Storage(s3.uri, s3.options)
    acked: dict[str, tuple[int, int]] = {}
    uri = storage.topic_uri("t")
    fs = storage.filesystem(uri)

    def data_files() -> set[str]:
        infos = fs.get_file_info(FileSelector("", recursive=True))
        return {i.path.strip("/") for i in infos if i.is_file and "_delta_log" not in i.path}

    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=2)
        stats = broker.log("t").maintainer.stats
        _produce(broker, 24, "a", acked)
        state = broker.log("t").maintainer._state
        deadline = time.monotonic() + 90
        removed: set[str] = set()  # every tombstone seen: compacted files
        while not (removed - data_files()) or stats.vacuums < 1:  # one of them left the bucket, vacuumed
            assert time.monotonic() < deadline, stats
            if state is None:
                state = broker.log("t").maintainer._state
            else:
                removed |= state[0].tombstones.paths()
            time.sleep(0.2)
        assert stats.compactions >= 2 and stats.failures == 0, stats
    rows = table_rows(storage, "t")  # every live file is still there: each acknowledged record is read
    check_log(rows, 2)
    check_acked(acked, rows)
    assert len(rows) == len(acked) == 48
