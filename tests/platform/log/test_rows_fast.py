"""The C-speed fast paths of platform/log/rows.py answer exactly as the per-record loops (issue 17)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from topiclake.errors import RecordTooLarge
from topiclake.platform.log.rows import LazyBatch, Rows, check, topic_table
from topiclake.schemas import CREATE_TIME, LOG_APPEND_TIME, TOPIC_SCHEMA


def _slow_nbytes(rows: Rows) -> int:
    n = 0
    for k, v, h in zip(rows.keys, rows.values, rows.headers, strict=True):
        n += len(k or b"") + len(v or b"") + 16
        if h:
            n += sum(len(x["key"]) + len(x["value"] or b"") for x in h)
    return n


def test_nbytes_plain_and_with_headers_match_the_per_record_sum() -> None:
    plain = Rows([None, b"k", b""], [b"v" * 10, None, b"x"], [None] * 3, [None] * 3)
    assert plain.plain()
    assert plain.nbytes() == _slow_nbytes(plain)
    headed = Rows([b"k"], [b"v"], [[{"key": "h", "value": b"12"}]], [None])
    assert not headed.plain()
    assert headed.nbytes() == _slow_nbytes(headed)


def test_check_fast_path_still_finds_a_record_too_large() -> None:
    rows = Rows([None, b"k" * 10, None], [b"v", b"v" * 95, b"v" * 99], [None] * 3, [None] * 3)
    assert check(rows, [None] * 3, "t", 105, 1) == {}
    errors = check(rows, [None] * 3, "t", 100, 1)
    assert list(errors) == [1] and isinstance(errors[1], RecordTooLarge)


@pytest.mark.parametrize("stamps", [[None, None], [5, None], [7, 8]])
def test_topic_table_timestamps(stamps: list[int | None]) -> None:
    rows = Rows([None, b"k"], [b"a", b"b"], [None, None], stamps)
    table = topic_table("t", [(0, 10, LazyBatch(rows, 0, 1_000, False))])
    micros = table["timestamp"].cast(pa.int64()).to_pylist()
    assert micros == [(1_000 if s is None else s) * 1000 for s in stamps]
    assert table["offset"].to_pylist() == [10, 11]


def test_topic_table_timestamp_out_of_range_fails_as_before() -> None:
    rows = Rows([None], [b"a"], [None], [2**62])
    with pytest.raises(pa.ArrowInvalid):
        topic_table("t", [(0, 0, LazyBatch(rows, 0, 1_000, False))])


def _reference_table(topic: str, batches: list[tuple[int, int, LazyBatch]]) -> pa.Table:
    """The topic table built one record at a time: what topic_table's runs and ranges must equal."""
    cols: dict[str, list[object]] = {name: [] for name in TOPIC_SCHEMA.names}
    for partition, base, b in batches:
        r = b.rows
        for i in range(len(r)):
            ts = r.timestamps[i]
            stamp = b.now if b.log_append_time or ts is None else ts
            seq = None if b.base_sequence is None else b.base_sequence + i
            row: list[object] = [r.keys[i], r.values[i], topic, partition, base + i, stamp * 1000]
            row += [LOG_APPEND_TIME if b.log_append_time else CREATE_TIME, r.headers[i], b.segment]
            row += [b.producer_id, b.producer_epoch, seq]
            for name, value in zip(TOPIC_SCHEMA.names, row, strict=True):
                cols[name].append(value)
    arrays = [pa.array(cols[f.name], pa.int64() if f.name == "timestamp" else f.type) for f in TOPIC_SCHEMA]
    arrays[5] = arrays[5].cast(TOPIC_SCHEMA.field("timestamp").type)
    return pa.Table.from_arrays(arrays, schema=TOPIC_SCHEMA)


_HEADER_CHOICES = [None, [{"key": "h", "value": b"x"}], [{"key": "a", "value": None}]]


def test_topic_table_equals_the_record_by_record_build() -> None:
    rnd = random.Random(17)
    for _ in range(300):
        batches = []
        for _ in range(rnd.randint(1, 6)):
            n = rnd.randint(1, 5)
            rows = Rows(
                [rnd.choice([None, b"k", b""]) for _ in range(n)],
                [rnd.choice([None, b"v" * rnd.randint(0, 5)]) for _ in range(n)],
                [
                    rnd.choice([None, [{"key": "h", "value": b"x"}], [{"key": "a", "value": None}]])
                    for _ in range(n)
                ],
                [rnd.choice([None, None, rnd.randint(0, 2**40)]) for _ in range(n)],
            )
            lazy = LazyBatch(rows, rnd.choice([0, 100]), rnd.randint(0, 2**41), rnd.random() < 0.3)
            if rnd.random() < 0.4:
                lazy.producer_id, lazy.producer_epoch = rnd.randint(0, 9), rnd.randint(0, 3)
                lazy.base_sequence = rnd.randint(0, 1000)
            batches.append((rnd.randint(0, 3), rnd.randint(0, 10**6), lazy))
        assert topic_table("tp", batches).equals(_reference_table("tp", batches))
