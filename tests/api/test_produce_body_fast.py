"""The plain-JSON fast path of api/produce_body.py stores the very bytes the general path stores."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from topiclake.api.produce_body import result_bodies, rows_from_json
from topiclake.errors import InvalidRecord
from topiclake.platform import RecordResult

CASES: list[dict[str, Any]] = [
    {"value": "héllo"},
    {"value": 'a"b'},
    {"value": "tab\t and \\ and \x01"},
    {"value": "😀 \u2028 / \x7f"},
    {"value": None},
    {"value": {"x": [1, 2.5, None]}},
    {"value": 3},
    {"key": "k", "value": "v"},
    {"key": 7, "value": "w"},
    {"key": None, "value": "z"},
    {},
]


@pytest.mark.parametrize("record", CASES)
def test_plain_records_encode_like_the_general_path(record: dict[str, Any]) -> None:
    fast, explicit, errors = rows_from_json([record, {"value": "ok"}], "json")
    # a "partition": null member sends the same records down the per-record loop
    slow, _, _ = rows_from_json([{**record, "partition": None}, {"value": "ok", "partition": None}], "json")
    assert (fast.keys, fast.values, fast.headers, fast.timestamps) == (
        slow.keys,
        slow.values,
        slow.headers,
        slow.timestamps,
    )
    assert explicit == [None, None] and errors == {}
    value = record.get("value")
    assert fast.values[0] == (None if value is None else orjson.dumps(value))


def test_a_lone_surrogate_is_refused_as_before() -> None:
    with pytest.raises(TypeError):
        rows_from_json([{"value": "\ud800"}], "json")


def test_result_bodies_with_and_without_errors() -> None:
    ok = [RecordResult(0, 5, 1_000), RecordResult(0, 6, 1_000)]
    assert result_bodies(ok, {}, 2) == [
        {"partition": 0, "offset": 5, "timestamp": 1_000, "error": None},
        {"partition": 0, "offset": 6, "timestamp": 1_000, "error": None},
    ]
    mixed = result_bodies(ok, {1: InvalidRecord("bad")}, 3)
    assert mixed[1]["error"]["code"] == InvalidRecord("bad").code and mixed[2]["offset"] == 6
