"""The retention job: whole sealed segments go by time and by size, never the active one; the log start
advances, the high watermark stays, and the gateway's core continues at the old end."""

from __future__ import annotations

from pathlib import Path

from _jobs_support import (
    BASE_TS,
    add_actions,
    check_core_after_job,
    commit_actions,
    hwm,
    make_topic,
    rounds,
    segments,
    table_rows,
)
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.jobs import retention
from topiclake.platform import Broker, BrokerConfig

# One request = one file of 5 records; a segment of 600 bytes is sealed after a few requests (4 with these
# records): 12 rounds give every partition two sealed segments and the active one. Round r's records have
# timestamps BASE_TS + r s.
SEGMENTED: dict[str, str | int] = {"segment.bytes": "600"}


def _layout(uri: str, partitions: int) -> list[int]:
    """The segments (the same in every partition): two sealed ones, then the active one."""
    segs = segments(uri, 0)
    assert len(segs) == 3 and segs[0] == 0, segs
    for p in range(partitions):
        assert segments(uri, p) == segs
    return segs


def _below(before: dict[tuple[int, int], object], offset: int) -> set[tuple[int, int]]:
    return {(p, o) for (p, o) in before if o < offset}


def test_retention_by_time_deletes_expired_sealed_segments_only(spark: SparkSession, warehouse: str) -> None:
    topic = make_topic(
        warehouse,
        partitions=2,
        configs={**SEGMENTED, "retention.ms": "5000"},
        batches=rounds(2, 12, 5),
    )
    _, second_seg, active = _layout(topic.uri, 2)
    before = table_rows(topic.uri)
    ends = {p: hwm(topic.uri, "orders", p) for p in range(2)}
    assert ends == {0: 60, 1: 60}
    version = DeltaTable(topic.uri).version()

    # the newest record of segment 0 is from round second_seg/5 - 1, the first of the next segment from
    # round second_seg/5: a horizon of half a second after that expires segment 0 only
    horizon = BASE_TS + (second_seg // 5) * 1000 + 500
    first = retention.run(
        spark,
        retention.RetentionConfig(
            warehouse=warehouse, topics=("orders",), now_ms=horizon + 5000, vacuum=False
        ),
    )
    [res] = first.topics
    gone = _below(before, second_seg)
    assert res.records_removed == len(gone) == 2 * second_seg
    assert res.details["segments_deleted"] == 2 and res.commits == 1
    assert res.log_start_offsets == {0: second_seg, 1: second_seg}
    assert table_rows(topic.uri) == {k: v for k, v in before.items() if k not in gone}
    for p in range(2):
        assert segments(topic.uri, p) == [second_seg, active]
        assert hwm(topic.uri, "orders", p) == ends[p]
    # one metadata-only DELETE: files removed, none added, no txn touched
    actions = commit_actions(topic.uri, version + 1)
    assert next(a["commitInfo"]["operation"] for a in actions if "commitInfo" in a) == "DELETE"
    assert not any("add" in a or "txn" in a for a in actions)
    removed_files = sum("remove" in a for a in actions)
    assert removed_files == 2 * second_seg // 5
    with Broker(topic.storage, BrokerConfig(maintenance=False)) as broker:
        assert broker.list_offsets("orders", 0, "earliest") == second_seg

    # far in the future: every sealed segment is expired, the active one stays; files are vacuumed
    second = retention.run(
        spark,
        retention.RetentionConfig(
            warehouse=warehouse,
            topics=("orders",),
            now_ms=BASE_TS + 10**9,
            vacuum_retention_hours=0,
        ),
    )
    [res] = second.topics
    gone = _below(before, active)
    assert res.records_removed == 2 * (active - second_seg)
    assert res.log_start_offsets == {0: active, 1: active}
    assert table_rows(topic.uri) == {k: v for k, v in before.items() if k not in gone}
    assert res.details["files_vacuumed"] == 2 * active // 5
    on_disk = {p.relative_to(topic.uri).as_posix() for p in Path(topic.uri).rglob("*.parquet")}
    live = {str(a["path"]) for a in add_actions(topic.uri)}
    assert {f for f in on_disk if not f.startswith("_delta_log")} == live
    assert (Path(topic.uri) / "_delta_log" / "_last_checkpoint").exists()
    for p in range(2):
        assert segments(topic.uri, p) == [active]
        assert hwm(topic.uri, "orders", p) == ends[p]
    assert f"log start 0:{active} 1:{active}" in second.summary()

    check_core_after_job(topic, gone)


def test_retention_by_size_and_policies_in_one_run(spark: SparkSession, warehouse: str) -> None:
    sized = make_topic(warehouse, "sized", partitions=2, configs=SEGMENTED, batches=rounds(2, 12, 5))
    zero = make_topic(
        warehouse,
        "zero",
        partitions=1,
        configs={**SEGMENTED, "retention.bytes": "0"},
        batches=rounds(1, 12, 5),
    )
    keyed = make_topic(
        warehouse,
        "keyed",
        partitions=1,
        configs={**SEGMENTED, "cleanup.policy": "compact", "retention.ms": "0", "retention.bytes": "0"},
        batches=rounds(1, 12, 5),
    )
    _, second_seg, active = _layout(sized.uri, 2)
    assert _layout(zero.uri, 1) == [0, second_seg, active]
    # retention.bytes such that every partition of "sized" is over it by less than its oldest segment
    sizes: dict[tuple[int, int], int] = {}
    for a in add_actions(sized.uri):
        key = (int(str(a["partition.partition"])), int(str(a["partition.segment"])))
        sizes[key] = sizes.get(key, 0) + int(str(a["size_bytes"]))
    totals = {p: sum(v for (q, _), v in sizes.items() if q == p) for p in range(2)}
    limit = max(totals[p] - sizes[(p, 0)] for p in range(2))
    assert all(limit < totals[p] for p in range(2))
    with Broker(sized.storage, BrokerConfig(maintenance=False)) as broker:
        broker.alter_topic_configs("sized", set={"retention.bytes": limit})
    before = {t.name: table_rows(t.uri) for t in (sized, zero, keyed)}

    result = retention.run(
        spark,
        retention.RetentionConfig(
            warehouse=warehouse, topics=("sized", "zero", "keyed"), now_ms=BASE_TS, vacuum=False
        ),
    )
    by_topic = {r.topic: r for r in result.topics}
    assert [r.topic for r in result.topics] == ["sized", "zero", "keyed"]

    # over the limit: only the oldest segment goes; what remains is within the limit
    gone = _below(before["sized"], second_seg)
    assert by_topic["sized"].records_removed == 2 * second_seg
    assert by_topic["sized"].log_start_offsets == {0: second_seg, 1: second_seg}
    assert table_rows(sized.uri) == {k: v for k, v in before["sized"].items() if k not in gone}

    # retention.bytes=0: every sealed segment goes, never the active one
    assert by_topic["zero"].log_start_offsets == {0: active}
    assert segments(zero.uri, 0) == [active] and hwm(zero.uri, "zero", 0) == 60
    assert by_topic["zero"].records_removed == active

    # cleanup.policy=compact: retention does not apply
    assert by_topic["keyed"].skipped == "cleanup.policy=compact"
    assert table_rows(keyed.uri) == before["keyed"]
    assert "keyed: skipped (cleanup.policy=compact)" in result.summary()

    check_core_after_job(sized, gone)
    check_core_after_job(zero, _below(before["zero"], active))
