"""The broker over real Delta tables: produce, fetch, offsets, idempotence, bad input, recovery."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures

from topiclake.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionNotFound,
    RecordTooLarge,
    StorageError,
    Throttled,
    TopicNotFound,
)
from topiclake.platform import Broker, BrokerConfig, ProducerInfo, Record, Storage, partition_for_key
from topiclake.platform.log.topic_log import partition_app_id
from topiclake.schemas import TOPIC_SCHEMA


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "wh"))


@pytest.fixture
def broker(storage: Storage):  # type: ignore[no-untyped-def]
    b = Broker(storage, BrokerConfig(linger_ms=1))
    yield b
    b.close()


def table_rows(storage: Storage, topic: str) -> pa.Table:
    return (
        DeltaTable(storage.topic_uri(topic))
        .to_pyarrow_table()
        .sort_by([("partition", "ascending"), ("offset", "ascending")])
    )


def test_produce_then_fetch_round_trip(broker: Broker, storage: Storage) -> None:
    broker.create_topic("orders", partitions=3)
    records = [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("h", b"x"), ("n", None)],
            timestamp_ms=1_700_000_000_000 + i,
        )
        for i in range(50)
    ]
    results = broker.produce("orders", records)
    assert all(r.error is None for r in results)
    for rec, res in zip(records, results, strict=True):
        assert res.partition == partition_for_key(rec.key or b"", 3)
    by_part: dict[int, list[int]] = {}
    for res in results:
        by_part.setdefault(res.partition or 0, []).append(res.offset or 0)
    for offsets in by_part.values():
        assert offsets == list(range(len(offsets)))
    # every acks=all answer is already in the Delta table
    rows = table_rows(storage, "orders")
    assert rows.num_rows == 50
    fetched = broker.fetch("orders", results[0].partition or 0, results[0].offset or 0, max_records=1)
    row = fetched.records.to_pylist()[0]
    assert row["key"] == b"k0" and row["value"] == b"v0"
    assert row["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert row["timestamp"].timestamp() == pytest.approx(1_700_000_000.000)
    assert row["timestampType"] == 0 and row["topic"] == "orders"


def test_fetch_from_table_equals_fetch_from_tail(storage: Storage) -> None:
    with Broker(storage, BrokerConfig(linger_ms=0)) as warm:
        warm.create_topic("t", partitions=1)
        for i in range(20):
            warm.produce("t", [Record(value=f"{i}-{j}".encode()) for j in range(7)])
        tail = warm.fetch("t", 0, 5, max_records=1000)
    with Broker(storage, BrokerConfig(tail_cache_bytes=0)) as cold:  # nothing cached: reads files
        table = cold.fetch("t", 0, 5, max_records=1000)
        assert cold.log("t")._parts[0].tail.start_offset() is None
    assert table.records.num_rows == 135
    assert table.records["offset"].to_pylist() == list(range(5, 140))
    assert table.records.select(["offset", "value"]).equals(tail.records.select(["offset", "value"]))
    assert table.high_watermark == 140 and table.next_offset == 140


def test_fetch_bounds_and_out_of_range(broker: Broker) -> None:
    broker.create_topic("t")
    broker.produce("t", [Record(value=b"x" * 1000) for _ in range(10)])
    one = broker.fetch("t", 0, 0, max_bytes=10)  # a record larger than max_bytes still comes back
    assert one.records.num_rows == 1
    assert broker.fetch("t", 0, 3, max_records=4).records["offset"].to_pylist() == [3, 4, 5, 6]
    end = broker.fetch("t", 0, 10)
    assert end.records.num_rows == 0 and end.high_watermark == 10
    with pytest.raises(OffsetOutOfRange) as err:
        broker.fetch("t", 0, 11)
    assert err.value.details["high_watermark"] == 10
    with pytest.raises(OffsetOutOfRange):
        broker.fetch("t", 0, -1)
    with pytest.raises(PartitionNotFound):
        broker.fetch("t", 1, 0)
    with pytest.raises(TopicNotFound):
        broker.fetch("nope", 0, 0)


def test_long_poll_returns_when_data_arrives(broker: Broker) -> None:
    broker.create_topic("t")
    timer = threading.Timer(0.2, lambda: broker.produce("t", [Record(value=b"late")]))
    timer.start()
    started = time.monotonic()
    got = broker.fetch("t", 0, 0, wait_ms=5000)
    waited = time.monotonic() - started
    timer.join()
    assert got.records["value"].to_pylist() == [b"late"]
    assert waited < 4.0  # returned on arrival, not at the end of the wait
    empty = broker.fetch("t", 0, 1, wait_ms=50)
    assert empty.records.num_rows == 0


def test_watchers_wake_once_on_commit_and_tail_reads_stop_at_the_end(broker: Broker) -> None:
    """A long poll without a thread: a watcher is called once when a commit moves the end past its
    offset, not at all once unwatched, and never registered when the end is past already; the tail read
    an event loop makes of what woke it holds exactly the committed records."""
    broker.create_topic("t", partitions=2)
    log = broker.open_log("t")
    assert log is not None
    calls: list[str] = []
    assert log.watch(0, 0, lambda: calls.append("p0"))
    assert log.watch(1, 0, lambda: calls.append("p1"))
    dropped = lambda: calls.append("dropped")  # noqa: E731
    assert log.watch(0, 0, dropped)
    log.unwatch(0, dropped)
    assert log.read_tail(0, 0, 10, 1 << 20) is None  # nothing committed yet
    broker.produce("t", [Record(value=b"a", partition=0), Record(value=b"b", partition=0)])
    assert calls == ["p0"]  # partition 1 did not move; the unwatched one is gone
    assert not log.watch(0, 1, lambda: calls.append("late"))  # the end is past offset 1 already
    tail = log.read_tail(0, 1, 10, 1 << 20)
    assert tail is not None and tail[1] == 2
    assert tail[0]["value"].to_pylist() == [b"b"] and tail[0]["offset"].to_pylist() == [1]
    assert log.read_tail(0, 2, 10, 1 << 20) is None  # at the end: nothing to read
    broker.produce("t", [Record(value=b"c", partition=0)])
    assert calls == ["p0"]  # called once, then dropped

    def boom() -> None:
        raise RuntimeError("a watcher that fails")

    assert log.watch(0, 3, boom)
    broker.produce("t", [Record(value=b"d", partition=0)])
    broker.produce("t", [Record(value=b"e", partition=0)])  # the flusher survived the failing watcher
    assert log.high_watermark(0) == 5
    broker.close()
    assert calls == ["p0", "p1"]  # closing wakes every long poll


def test_acks_1_and_0(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t")
    r1 = broker.produce("t", [Record(value=b"a"), Record(value=b"b")], acks=1)
    assert [r.offset for r in r1] == [0, 1]
    r0 = broker.produce("t", [Record(value=b"c")], acks=0)
    assert r0[0].offset is None and r0[0].error is None
    got = broker.fetch("t", 0, 0, wait_ms=2000, max_records=10)
    deadline = time.monotonic() + 5
    while got.high_watermark < 3 and time.monotonic() < deadline:
        got = broker.fetch("t", 0, 0, wait_ms=200, max_records=10)
    assert got.records["value"].to_pylist() == [b"a", b"b", b"c"]
    with pytest.raises(InvalidRecord):
        broker.produce("t", [Record(value=b"x")], acks=2)


def test_keyless_records_spread_and_explicit_partition_wins(broker: Broker) -> None:
    broker.create_topic("t", partitions=4)
    res = broker.produce("t", [Record(value=b"x") for _ in range(400)])
    counts = [sum(1 for r in res if r.partition == p) for p in range(4)]
    assert max(counts) - min(counts) <= 1
    res = broker.produce("t", [Record(key=b"k", value=b"x", partition=3)])
    assert res[0].partition == 3
    res = broker.produce("t", [Record(key=b"k", value=b"y")], partition=2)
    assert res[0].partition == 2


def test_list_offsets(broker: Broker) -> None:
    broker.create_topic("t")
    broker.produce("t", [Record(value=b"x", timestamp_ms=1000 * (i + 1)) for i in range(10)])
    assert broker.list_offsets("t", 0, "earliest") == 0
    assert broker.list_offsets("t", 0, "latest") == 10
    assert broker.list_offsets("t", 0, 0) == 0
    assert broker.list_offsets("t", 0, 3500) == 3
    assert broker.list_offsets("t", 0, 4000) == 3
    assert broker.list_offsets("t", 0, 10_001) is None
    assert broker.list_offsets("t", 0, -2) == 0 and broker.list_offsets("t", 0, -1) == 10


def test_log_append_time(broker: Broker) -> None:
    broker.create_topic("t", configs={"message.timestamp.type": "LogAppendTime"})
    before = time.time()
    broker.produce("t", [Record(value=b"x", timestamp_ms=5)])
    row = broker.fetch("t", 0, 0).records.to_pylist()[0]
    assert row["timestampType"] == 1
    assert row["timestamp"].timestamp() >= before - 1


def test_bad_records_get_their_own_error_and_lose_nothing(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t", partitions=2, configs={"max.message.bytes": 100})
    broker.produce("t", [Record(value=b"before", partition=0)])
    version = DeltaTable(storage.topic_uri("t")).version()
    res = broker.produce(
        "t",
        [
            Record(value=b"ok", partition=0),
            Record(value=b"x" * 101, partition=0),
            Record(value=b"bad partition", partition=7),
            Record(value=b"neg ts", timestamp_ms=-5, partition=0),
            Record(value=b"ok2", partition=0),
        ],
    )
    assert [type(r.error).__name__ if r.error else None for r in res] == [
        None,
        "RecordTooLarge",
        "PartitionNotFound",
        "InvalidRecord",
        None,
    ]
    assert [r.offset for r in res] == [1, None, None, None, 2]
    rows = table_rows(storage, "t")
    assert rows["value"].to_pylist() == [b"before", b"ok", b"ok2"]
    assert DeltaTable(storage.topic_uri("t")).version() == version + 1
    with pytest.raises(RecordTooLarge):  # the columnar path checks too
        broker.produce_arrow("t", 0, pa.table({"value": pa.array([b"y" * 500], pa.binary())}))
    with pytest.raises(PartitionNotFound):
        broker.produce("t", [Record(value=b"x")], partition=5)
    with pytest.raises(TopicNotFound):
        broker.produce("missing", [Record(value=b"x")])
    assert table_rows(storage, "t").num_rows == 3


def test_columnar_produce(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t", partitions=2)
    data = pa.table(
        {"key": pa.array([b"a", None], pa.binary()), "value": pa.array([b"1", b"2"], pa.binary())}
    )
    assert broker.produce_arrow("t", 1, data) == (1, 2, 0)
    assert broker.produce_arrow("t", 1, data) == (1, 2, 2)
    rows = broker.fetch("t", 1, 0).records
    assert rows["key"].to_pylist() == [b"a", None, b"a", None]
    assert rows["offset"].to_pylist() == [0, 1, 2, 3]


def test_idempotent_producer(storage: Storage) -> None:
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("t", partitions=2)
        pid = broker.init_producer().producer_id
        batch = [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2"), Record(key=b"c", value=b"3")]
        first = broker.produce("t", batch, producer=ProducerInfo(pid, 0, 0))
        retry = broker.produce("t", batch, producer=ProducerInfo(pid, 0, 0))
        assert [(r.partition, r.offset) for r in retry] == [(r.partition, r.offset) for r in first]
        nxt = broker.produce("t", [Record(key=b"a", value=b"4")], producer=ProducerInfo(pid, 0, 3))
        assert nxt[0].error is None
        with pytest.raises(OutOfOrderSequence):
            broker.produce("t", [Record(value=b"gap")], producer=ProducerInfo(pid, 0, 10))
        with pytest.raises(OutOfOrderSequence):
            broker.produce("t", [Record(value=b"new")], producer=ProducerInfo(pid + 1, 0, 5))
        assert table_rows(storage, "t").num_rows == 4
    with Broker(storage) as restarted:  # the retry after a restart is still recognised, with its offsets
        again = restarted.produce("t", batch, producer=ProducerInfo(pid, 0, 0))
        assert [(r.partition, r.offset) for r in again] == [(r.partition, r.offset) for r in first]
        assert table_rows(storage, "t").num_rows == 4
        bumped = restarted.produce("t", [Record(value=b"e1")], producer=ProducerInfo(pid, 1, 0))
        assert bumped[0].error is None
        with pytest.raises(InvalidProducerEpoch):
            restarted.produce("t", [Record(value=b"zombie")], producer=ProducerInfo(pid, 0, 4))
        assert table_rows(storage, "t").num_rows == 5


def test_throttled_when_buffers_are_full(storage: Storage) -> None:
    with Broker(storage, BrokerConfig(linger_ms=300, buffer_max_bytes=4096)) as broker:
        broker.create_topic("t")
        broker.produce("t", [Record(value=b"x" * 3000)], acks=1)
        with pytest.raises(Throttled) as err:
            broker.produce("t", [Record(value=b"y" * 3000)], acks=1)
        assert err.value.retriable and err.value.retry_after_ms > 0
        deadline = time.monotonic() + 30  # the flush commits (linger 300 ms) and frees the buffer
        while True:
            try:
                broker.produce("t", [Record(value=b"z" * 3000)], acks="all")
                break
            except Throttled:  # not yet (a loaded machine): retry as a client would, after retry_after_ms
                assert time.monotonic() < deadline, "the buffer was never freed"
                time.sleep(err.value.retry_after_ms / 1000)
        assert broker.budget.used == 0
        assert broker.fetch("t", 0, 0, max_records=10).records["value"].to_pylist() == [
            b"x" * 3000,
            b"z" * 3000,
        ]


def test_restart_recovers_and_offsets_are_never_reused(storage: Storage) -> None:
    with Broker(storage) as broker:
        broker.create_topic("t", partitions=2)
        broker.produce("t", [Record(value=b"x", partition=p) for p in (0, 0, 0, 1)])
    DeltaTable(storage.topic_uri("t")).delete()  # as if retention removed every record
    with Broker(storage) as broker:
        assert broker.list_offsets("t", 0, "latest") == 3
        assert broker.list_offsets("t", 0, "earliest") == 3
        res = broker.produce("t", [Record(value=b"after", partition=0)])
        assert res[0].offset == 3
        with pytest.raises(OffsetOutOfRange):
            broker.fetch("t", 0, 0)
        assert broker.fetch("t", 0, 3).records["value"].to_pylist() == [b"after"]
    dt = DeltaTable(storage.topic_uri("t"))
    assert dt.transaction_version(partition_app_id("t", 0)) == 4
    assert dt.transaction_version(partition_app_id("t", 1)) == 1


def test_segments_roll_and_partition_the_table(storage: Storage) -> None:
    with Broker(storage, BrokerConfig(linger_ms=0)) as broker:
        broker.create_topic("t", configs={"segment.bytes": 2000})
        for _ in range(10):
            broker.produce("t", [Record(value=b"x" * 500) for _ in range(2)])
        rows = table_rows(storage, "t")
    segments = sorted(set(rows["segment"].to_pylist()))
    assert len(segments) > 2
    for seg in segments:  # a segment is named by its first offset and holds a contiguous range
        offs = sorted(
            o
            for o, s in zip(rows["offset"].to_pylist(), rows["segment"].to_pylist(), strict=True)
            if s == seg
        )
        assert offs[0] == seg
    parts = {tuple(sorted(p.items())) for p in DeltaTable(storage.topic_uri("t")).partitions()}
    assert len(parts) == len(segments)


def test_commit_is_retried_after_a_concurrent_delete(storage: Storage) -> None:
    with Broker(storage, BrokerConfig(linger_ms=0)) as broker:
        broker.create_topic("t", partitions=2)
        broker.produce("t", [Record(value=b"old", partition=1)])
        other = DeltaTable(storage.topic_uri("t"))
        stop = threading.Event()

        def deleter() -> None:
            while not stop.is_set():
                other.update_incremental()
                other.delete("partition = 1")

        thread = threading.Thread(target=deleter)
        thread.start()
        try:
            for i in range(30):
                res = broker.produce("t", [Record(value=str(i).encode(), partition=0)])
                assert res[0].error is None and res[0].offset == i
        finally:
            stop.set()
            thread.join()
        rows = broker.fetch("t", 0, 0, max_records=100).records
        assert rows["offset"].to_pylist() == list(range(30))
        assert rows["value"].to_pylist() == [str(i).encode() for i in range(30)]


def test_partitions_grow_and_topics_are_deleted(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t", partitions=1)
    broker.produce("t", [Record(value=b"x")])
    broker.increase_partitions("t", 3)
    assert broker.produce("t", [Record(value=b"y", partition=2)])[0].offset == 0
    broker.delete_topic("t")
    assert not Path(storage.topic_uri("t")).exists()
    with pytest.raises(TopicNotFound):
        broker.produce("t", [Record(value=b"z")])
    broker.create_topic("t", partitions=1)
    assert broker.produce("t", [Record(value=b"fresh")])[0].offset == 0


def test_topic_table_is_pinned_to_what_delta_rs_writes(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t")
    dt = DeltaTable(storage.topic_uri("t"))
    assert dt.metadata().configuration["delta.enableDeletionVectors"] == "false"
    assert dt.metadata().partition_columns == ["partition", "segment"]
    assert dt.protocol().min_writer_version <= 2 and dt.protocol().min_reader_version == 1
    assert [f.name for f in dt.schema().fields] == TOPIC_SCHEMA.names


def test_a_topic_created_by_another_broker_is_found(storage: Storage) -> None:
    with Broker(storage) as one, Broker(storage) as two:
        one.list_topics()
        two.create_topic("shared", partitions=2)
        assert one.produce("shared", [Record(value=b"x", partition=1)])[0].offset == 0


def test_empty_columnar_batch_commits_nothing(broker: Broker, storage: Storage) -> None:
    broker.create_topic("t")
    version = DeltaTable(storage.topic_uri("t")).version()
    assert broker.produce_arrow("t", 0, pa.table({"value": pa.array([], pa.binary())})) == (0, 0, None)
    assert broker.produce("t", []) == []
    assert DeltaTable(storage.topic_uri("t")).version() == version
    with pytest.raises(PartitionNotFound):
        broker.produce_arrow("t", 3, pa.table({"value": pa.array([], pa.binary())}))


def test_a_table_with_features_delta_rs_cannot_write_is_refused(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage) as broker:
        broker.create_topic("t")
    dt = DeltaTable(storage.topic_uri("t"))
    dt.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # allowed: delta-rs writes CDF
    with Broker(storage) as broker:
        broker.produce("t", [Record(value=b"ok")])
    dt.alter.add_feature(TableFeatures.DomainMetadata, allow_protocol_versions_increase=True)
    with Broker(storage) as broker, pytest.raises(StorageError, match="domainMetadata"):
        broker.produce("t", [Record(value=b"refused")])


def test_columnar_path_counts_headers_and_checks_timestamps(broker: Broker) -> None:
    broker.create_topic("t", configs={"max.message.bytes": "200"})
    headers = pa.array([[{"key": "h", "value": b"x" * 150}]], TOPIC_SCHEMA.field("headers").type)
    big = pa.table({"value": pa.array([b"v" * 100], pa.binary()), "headers": headers})
    with pytest.raises(RecordTooLarge):
        broker.produce_arrow("t", 0, big)
    with pytest.raises(InvalidRecord, match="negative"):
        broker.produce_arrow(
            "t", 0, pa.table({"value": pa.array([b"v"]), "timestamp_ms": pa.array([-5], pa.int64())})
        )
    assert broker.list_offsets("t", 0, "latest") == 0
