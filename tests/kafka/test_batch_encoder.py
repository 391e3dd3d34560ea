"""The columnar RecordBatch encoder against the per-record one it replaced, and against a decode.

No server: random topic-table rows (keys, values, nulls, headers with null values, negative and large
timestamp deltas, offset gaps, both timestamp types, chunked and sliced tables) are encoded both ways.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from topiclake.kafka import batch_encoder, records
from topiclake.kafka.batch_encoder import encode_table, encode_up_to
from topiclake.schemas import LOG_APPEND_TIME, TOPIC_SCHEMA


def _old_encode(rows: pa.Table, leader_epoch: int = 0) -> bytes:
    """The per-record encoder the listener used before (aiokafka's builder, one call a record)."""
    if rows.num_rows == 0:
        return b""
    offsets = rows["offset"].to_pylist()
    stamps = pc.cast(rows["timestamp"], pa.int64()).to_pylist()
    types = rows["timestampType"].to_pylist()
    keys, values, headers = (rows[c].to_pylist() for c in ("key", "value", "headers"))
    out = bytearray()
    start, n = 0, len(offsets)
    while start < n:
        end = start + 1
        while end < n and types[end] == types[start]:
            end += 1
        builder: Any = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
        for i in range(start, end):
            pairs = [(x["key"], x["value"]) for x in headers[i]] if headers[i] else []
            builder.append(offsets[i] - offsets[start], stamps[i] // 1000, keys[i], values[i], pairs)
        buf = builder.build()
        struct.pack_into(">q", buf, 0, offsets[start])
        struct.pack_into(">i", buf, 12, leader_epoch)
        if types[start] == LOG_APPEND_TIME:
            attrs = struct.unpack_from(">h", buf, 21)[0] | 0x08
            struct.pack_into(">h", buf, 21, attrs)
            struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
        out += buf
        start = end
    return bytes(out)


def _rows(
    n: int, seed: int, *, headers: bool = True, lat: float = 0.0, one_stamp_per_type: bool = False
) -> pa.Table:
    r = random.Random(seed)
    keys = [None if r.random() < 0.3 else os.urandom(r.randrange(0, 300)) for _ in range(n)]
    values = [None if r.random() < 0.1 else os.urandom(r.choice([0, 1, 100, 200, 20_000])) for _ in range(n)]
    heads = [
        None
        if not headers or r.random() < 0.5
        else [
            {"key": f"h{j}-é", "value": None if r.random() < 0.2 else os.urandom(r.randrange(0, 200))}
            for j in range(r.randrange(0, 4))
        ]
        for _ in range(n)
    ]
    offsets, off = [], r.randrange(0, 1 << 40)
    for _ in range(n):
        off += r.choice([1, 1, 1, 2, 1000, 70_000])  # gaps: compacted keys
        offsets.append(off)
    types = [1 if r.random() < lat else 0 for _ in range(n)]
    stamps = [r.randrange(-1000, 1 << 41) * 1000 + r.randrange(1000) for _ in range(n)]
    if one_stamp_per_type:
        stamps = [1_700_000_000_000_000 + t * 7_000 for t in types]
    cols: dict[str, list[Any]] = {
        "key": keys,
        "value": values,
        "topic": ["t"] * n,
        "partition": [0] * n,
        "offset": offsets,
        "timestamp": stamps,
        "timestampType": types,
        "headers": heads,
        "segment": [0] * n,
        "producer_id": [None] * n,
        "producer_epoch": [None] * n,
        "sequence": [None] * n,
    }
    arrays = [pa.array(cols[f.name], pa.int64() if f.name == "timestamp" else f.type) for f in TOPIC_SCHEMA]
    return pa.Table.from_arrays(arrays, names=TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)


def _decode(data: bytes) -> list[tuple[Any, ...]]:
    """(offset, timestamp ms, timestamp type, key, value, headers) of every record, checking each CRC."""
    out = []
    pos = 0
    while pos < len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        batch = DefaultRecordBatch(data[pos : pos + 12 + length])
        assert batch.validate_crc()
        for rec in batch:
            out.append((rec.offset, rec.timestamp, rec.timestamp_type, rec.key, rec.value, list(rec.headers)))
        pos += 12 + length
    return out


def _expected(rows: pa.Table) -> list[tuple[Any, ...]]:
    return [
        (
            r["offset"],
            int(pc.cast(pa.scalar(r["timestamp"], pa.timestamp("us", tz="UTC")), pa.int64()).as_py()) // 1000,
            r["timestampType"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"] or []],
        )
        for r in rows.to_pylist()
    ]


@pytest.mark.parametrize("seed", range(8))
def test_create_time_batches_equal_the_old_encoder_byte_for_byte(seed: int) -> None:
    rows = _rows(300, seed)
    assert encode_table(rows, 5) == _old_encode(rows, 5)


@pytest.mark.parametrize("seed", range(4))
def test_mixed_timestamp_types_with_one_append_time_equal_the_old_encoder(seed: int) -> None:
    rows = _rows(300, seed, lat=0.3, one_stamp_per_type=True)
    assert encode_table(rows) == _old_encode(rows)


def test_a_log_append_time_batch_carries_one_append_time_and_every_record_reads_back() -> None:
    rows = _rows(400, 99, lat=0.5)
    data = encode_table(rows)
    decoded = _decode(data)
    expected = _expected(rows)
    # a client reads a LogAppendTime record's timestamp from its batch (max timestamp): still the record's
    assert decoded == expected


def test_no_headers_empty_headers_and_null_headers() -> None:
    rows = _rows(50, 3, headers=False)
    empty = rows.set_column(
        rows.schema.get_field_index("headers"),
        "headers",
        pa.array([[]] * 50, TOPIC_SCHEMA.field("headers").type),
    )
    assert encode_table(rows) == _old_encode(rows) == encode_table(empty) == _old_encode(empty)


def test_chunked_sliced_tables_and_records_encode() -> None:
    rows = _rows(200, 11)
    chunked = pa.concat_tables([rows.slice(0, 70), rows.slice(70, 60), rows.slice(130)])
    sliced = rows.slice(17, 150)
    assert encode_table(chunked) == _old_encode(rows)
    assert encode_table(sliced) == _old_encode(sliced)
    assert records.encode(sliced, 2) == _old_encode(sliced, 2)
    assert _decode(encode_table(sliced)) == _expected(sliced)


def test_empty_table_is_no_bytes() -> None:
    assert encode_table(TOPIC_SCHEMA.empty_table()) == b""


@pytest.mark.parametrize("limit", [1, 500, 10_000, 100_000, 10**9])
def test_encode_up_to_fills_the_limit_exactly_in_one_pass(limit: int) -> None:
    rows = _rows(300, 21, lat=0.3)
    data, kept = encode_up_to(rows, limit)
    assert data == encode_table(rows.slice(0, kept))
    assert kept >= 1 and (len(data) <= limit or kept == 1)
    if kept < rows.num_rows:  # one more row would not have fitted
        assert len(encode_table(rows.slice(0, kept + 1))) > limit


@pytest.mark.parametrize("seed", range(6))
def test_a_few_rows_encode_record_by_record_byte_for_byte_as_the_columnar_path(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch of a consumer at the tail (up to SMALL_ROWS rows) takes the per-record path; every row
    shape, both timestamp types and every limit give what the columnar path gives for the same rows."""
    cases = []
    for n in (1, 2, 5, batch_encoder.SMALL_ROWS):
        rows = _rows(n, seed * 100 + n, lat=0.4 if seed % 2 else 0.0, headers=seed != 2)
        sliced = _rows(n + 3, seed, lat=0.3).slice(2, n)
        for table in (rows, sliced):
            whole = len(encode_up_to(table, None)[0])  # limits at the exact size and one byte short
            for limit in (None, 1, 300, 5_000, 40_000, whole, whole - 1):
                cases.append((table, limit, encode_up_to(table, limit)))
    if seed % 2 == 0:
        assert cases[0][2][0] == _old_encode(cases[0][0])  # create time: the old encoder too
    monkeypatch.setattr(batch_encoder, "SMALL_ROWS", 0)  # the columnar path for the same rows
    for table, limit, small in cases:
        assert small == encode_up_to(table, limit)
        assert small[1] >= 1
