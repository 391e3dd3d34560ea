"""The C-speed fast paths of platform/rows.py answer exactly as the per-record loops (issue 17)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from topiclake.errors import RecordTooLarge
from topiclake.platform.rows import LazyBatch, Rows, check, topic_table


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
