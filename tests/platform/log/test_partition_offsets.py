"""The leader records every partition's ends in ``_system/partition_offsets`` as it goes (the topics' own
time travel), only when they moved; jobs record them after their commits."""

from __future__ import annotations

import time
from pathlib import Path

from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_app_id
from topiclake.platform.log.partition_offsets import record_partition_offsets, recorded_partition_offsets

FAST = BrokerConfig(linger_ms=0, maintenance_interval_ms=20, offsets_history_ms=100)


def _rows(storage: Storage) -> list[dict[str, object]]:
    uri = storage.system_uri("partition_offsets")
    if not storage.is_table(uri):
        return []
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["recorded_at"], r["partition"]))


def _wait_for(storage: Storage, predicate: object, timeout_s: float = 15) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _rows(storage)
        if predicate(rows):  # type: ignore[operator]
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)


def test_leader_records_ends_as_they_move_and_as_of_queries_work(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, FAST) as broker:
        broker.create_topic("t", partitions=2)
        info = broker.describe_topic("t")
        broker.produce("t", [Record(value=b"a")] * 3, partition=0)
        first = _wait_for(storage, lambda rows: any(r["end_offset"] == 3 for r in rows))
        t_between = time.time()
        time.sleep(0.3)
        quiet = len(_rows(storage))
        time.sleep(0.4)  # nothing moved: nothing more is recorded
        assert len(_rows(storage)) == quiet
        broker.produce("t", [Record(value=b"b")] * 2, partition=1)
        rows = _wait_for(
            storage, lambda rows: any(r["partition"] == 1 and r["end_offset"] == 2 for r in rows)
        )
    assert all(r["topic_id"] == info.topic_id and r["recorded_by"] == "broker-0" for r in rows)
    assert first[-1]["recorded_at"].timestamp() <= t_between  # type: ignore[union-attr]

    def as_of(when: float) -> dict[int, int]:
        ends: dict[int, int] = {}
        for r in rows:
            if r["recorded_at"].timestamp() <= when:  # type: ignore[union-attr]
                p, e = int(r["partition"]), int(r["end_offset"])  # type: ignore[call-overload]
                ends[p] = max(ends.get(p, 0), e)
        return ends

    assert as_of(t_between) == {0: 3, 1: 0}  # partition 1's records came later
    assert as_of(time.time()) == {0: 3, 1: 2}
    assert recorded_partition_offsets(storage)[(info.topic_id, 0)] == (0, 3)


def test_history_off_records_nothing_and_direct_records_work(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, FAST.model_copy(update={"offsets_history_ms": 0})) as broker:
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"a")] * 4)
        time.sleep(0.3)
        assert _rows(storage) == []
        ends = record_partition_offsets(storage, broker.describe_topic("t"), partition_app_id, "test")
    assert ends == {0: (0, 4)}
    assert [(r["log_start_offset"], r["end_offset"], r["recorded_by"]) for r in _rows(storage)] == [
        (0, 4, "test")
    ]
