"""The plain-JSON fast path of api/produce_body.py stores the very bytes the general path stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from topiclake.api.produce_body import answer_bodies, answer_json, result_bodies, rows_from_json
from topiclake.errors import InvalidRecord
from topiclake.platform import Broker, RecordResult, Storage, produce_rows
from topiclake.platform.config import BrokerConfig

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


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize(
    "records",
    [
        [{"value": "a"}, {"value": "b"}, {"value": "c"}],  # one partition, in order
        [{"key": f"k{i}", "value": "v"} for i in range(12)],  # spread over partitions by key
        [{"value": "a", "timestamp": 5}, {"value": "b"}],  # a CreateTime of its own
        [{"value": "a"}, {"value": "b", "partition": 9}],  # a record that fails
    ],
)
def test_answer_bodies_equal_the_result_objects(
    tmp_path: Path, acks: str, records: list[dict[str, Any]]
) -> None:
    broker = Broker(Storage(str(tmp_path / "wh")), BrokerConfig())
    try:
        broker.create_topic("t", partitions=3)
        broker.open_log("t")
        rows, explicit, errors = rows_from_json(records, "json")
        partition = None if any("key" in r for r in records) else 1
        pending = produce_rows.start(broker, "t", rows, explicit, partition=partition, acks=acks)
        assert pending is not None and pending.handle is not None
        pending.handle.wait(30)
        fast = answer_bodies(pending, errors, len(records))
        assert fast == result_bodies(pending.finish(), errors, len(records))
        # the answer as text: exactly the bytes orjson writes for those bodies, or None (then they are used)
        text = answer_json('t"1', pending, errors, len(records))
        stamped = any("timestamp" in r for r in records)
        served = acks != "0" and len(pending.ok) == len(records) and not stamped
        assert (text is not None) == served
        if text is not None:
            assert text == orjson.dumps({"topic": 't"1', "results": fast})
        if all(b["error"] is None for b in fast) and acks != "0":
            assert [b["offset"] for b in fast if b["partition"] == 1][:2] == [0, 1]
    finally:
        broker.close()
