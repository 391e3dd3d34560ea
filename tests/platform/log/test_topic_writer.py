"""TopicWriter: a second writer (Spark's sink, reprocessing) appends beside the gateway, exactly once."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from topiclake.errors import PartitionNotFound, TopicNotFound
from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_app_id, partition_for_key
from topiclake.platform.log.topic_writer import TopicWriter, writer_app_id


def _records(keys: list[bytes | None], prefix: str) -> pa.Table:
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([f"{prefix}-{i}".encode() for i in range(len(keys))], pa.binary()),
        }
    )


def _rows(storage: Storage, topic: str) -> list[dict[str, object]]:
    table = DeltaTable(storage.topic_uri(topic)).to_pyarrow_table(columns=["partition", "offset", "value"])
    return table.to_pylist()


def test_writer_partitions_by_key_and_continues_offsets(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    broker = Broker(storage, BrokerConfig(maintenance=False))
    broker.create_topic("t", 3)
    broker.produce("t", [Record(key=b"a", value=b"from-gateway")], acks="all")
    keys: list[bytes | None] = [b"a", b"b", b"c", b"a", None, None]
    result = TopicWriter(storage, "t").write(_records(keys, "w"))
    assert result.records == 6 and not result.skipped
    rows = _rows(storage, "t")
    by_value = {r["value"]: (r["partition"], r["offset"]) for r in rows}
    for i, key in enumerate(keys):
        if key is not None:
            assert by_value[f"w-{i}".encode()][0] == partition_for_key(key, 3)
    pa_ = partition_for_key(b"a", 3)
    assert sorted(o for p, o in by_value.values() if p == pa_)[:2] == [0, 1]  # gateway's 0, then ours
    # the gateway that was running is fenced on its next commit and moves behind the writer
    broker.produce("t", [Record(key=b"a", value=b"after")], acks="all")
    broker.close()
    rows = _rows(storage, "t")
    for p in range(3):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
        hwm = DeltaTable(storage.topic_uri("t")).transaction_version(partition_app_id("t", p))
        assert (hwm or 0) == len(offsets)


def test_same_writer_sequence_is_written_once(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    broker = Broker(storage, BrokerConfig(maintenance=False))
    broker.create_topic("t", 2)
    broker.close()
    writer = TopicWriter(storage, "t")
    first = writer.write(_records([b"k1", b"k2"], "x"), writer_id="job-1", sequence=1)
    again = TopicWriter(storage, "t").write(_records([b"k1", b"k2"], "x"), writer_id="job-1", sequence=1)
    assert first.records == 2 and again.skipped and again.records == 0
    nxt = writer.write(_records([b"k3"], "y"), writer_id="job-1", sequence=2)
    assert nxt.records == 1
    assert len(_rows(storage, "t")) == 3
    dt = DeltaTable(storage.topic_uri("t"))
    assert dt.transaction_version(writer_app_id("t", "job-1")) == 2
    # an empty micro-batch still records its sequence, so a replay of it is skipped too
    empty = writer.write(_records([], "z"), writer_id="job-1", sequence=3)
    assert empty.records == 0 and not empty.skipped
    dt.update_incremental()
    assert dt.transaction_version(writer_app_id("t", "job-1")) == 3


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    broker = Broker(storage, BrokerConfig(maintenance=False))
    broker.create_topic("t", 2)
    broker.close()
    version = DeltaTable(storage.topic_uri("t")).version()
    bad = _records([b"a"], "v").append_column("partition", pa.array([5], pa.int32()))
    with pytest.raises(PartitionNotFound):
        TopicWriter(storage, "t").write(bad)
    with pytest.raises(TopicNotFound):
        TopicWriter(storage, "missing")
    assert DeltaTable(storage.topic_uri("t")).version() == version


def test_writer_beside_a_live_gateway_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    broker = Broker(storage, BrokerConfig(linger_ms=1))
    broker.create_topic("t", 2)
    acked: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            value = f"g-{i}".encode()
            try:
                results = broker.produce("t", [Record(key=str(i % 7).encode(), value=value)], acks="all")
            except BaseException as exc:
                errors.append(exc)
                return
            if results[0].error is None:
                acked.append(value)
            else:
                errors.append(results[0].error)
            i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    written: list[bytes] = []
    try:
        writer = TopicWriter(storage, "t")
        for batch in range(15):
            table = _records([str(i).encode() for i in range(10)], f"s{batch}")
            writer.write(table, writer_id="stream", sequence=batch + 1)
            written += table["value"].to_pylist()
            # a replay of the same batch is a no-op
            assert writer.write(table, writer_id="stream", sequence=batch + 1).skipped
    finally:
        stop.set()
        thread.join(30)
        broker.close()
    assert not errors, errors
    rows = _rows(storage, "t")
    values = [r["value"] for r in rows]
    assert len(values) == len(set(values))
    assert set(acked) <= set(values)
    assert set(written) <= set(values)
    for p in range(2):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
