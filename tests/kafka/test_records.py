"""The RecordBatch adapter: topic-table rows -> RecordBatch v2 -> back, and the refusals."""

from __future__ import annotations

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from topiclake.kafka import records
from topiclake.platform.records import topic_rows
from topiclake.schemas import LOG_APPEND_TIME


def _rows(log_append: bool) -> pa.Table:
    data = pa.table(
        {
            "key": pa.array([b"a", None, b"c"], pa.binary()),
            "value": pa.array([b"1", b"", None], pa.binary()),
            "headers": pa.array(
                [[{"key": "h", "value": b"\x00"}], None, [{"key": "n", "value": None}]],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
            "timestamp_ms": pa.array([1_700_000_000_001, 1_700_000_000_002, None], pa.int64()),
        }
    )
    return topic_rows(data, "t", 0, 40, 0, 1_700_000_000_999, log_append)


def test_rows_round_trip_with_offsets_gaps_headers_and_timestamps() -> None:
    rows = _rows(False).take([0, 2])  # offsets 40 and 42: a gap left by key compaction
    raw = records.encode(rows, leader_epoch=3)
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc() and batch.base_offset == 40 and batch.timestamp_type == 0
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch]
    assert got == [
        (40, b"a", b"1", 1_700_000_000_001, [("h", b"\x00")]),
        (42, b"c", None, 1_700_000_000_999, [("n", None)]),
    ]
    decoded = records.decode(raw)[0].table
    assert (
        decoded["key"].to_pylist() == [b"a", b"c"]
        and decoded["timestamp_ms"].to_pylist()[0] == 1_700_000_000_001
    )


def test_log_append_time_batches_carry_the_attribute_and_a_valid_crc() -> None:
    rows = _rows(True)
    assert set(rows["timestampType"].to_pylist()) == {LOG_APPEND_TIME}
    batch = DefaultRecordBatch(records.encode(rows))
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [1_700_000_000_999] * 3


def test_every_codec_decodes_and_bad_input_is_refused() -> None:
    for codec in (0, 1, 2, 3, 4):  # none, gzip, snappy, lz4, zstd
        b = DefaultRecordBatchBuilder(2, codec, 0, 7, 1, 5, 1 << 20)
        for i in range(10):
            b.append(i, 1_700_000_000_000 + i, None, b"v%d" % i, [])
        raw = bytes(b.build())
        (one,) = records.decode(raw + b"")
        assert one.table["value"].to_pylist() == [b"v%d" % i for i in range(10)]
        assert (one.producer_id, one.producer_epoch, one.base_sequence) == (7, 1, 5)
    with pytest.raises(records.CorruptBatch):
        records.decode(raw[:-3])
    legacy = bytearray(raw)
    legacy[16] = 1  # magic 1: a legacy message set
    with pytest.raises(records.UnsupportedMagic):
        records.decode(bytes(legacy))
    corrupt = bytearray(raw)
    corrupt[-1] ^= 1
    with pytest.raises(records.CorruptBatch):
        records.decode(bytes(corrupt))
