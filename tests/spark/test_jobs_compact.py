"""The compaction job: fewer files, every record unchanged, files sorted by offset, a no-data-change commit,
and the gateway's core appends and reads afterwards."""

from __future__ import annotations

import itertools

from _jobs_support import (
    add_actions,
    check_core_after_job,
    commit_actions,
    file_offsets,
    make_topic,
    rounds,
    table_rows,
)
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.jobs import compact
from topiclake.jobs.common import human_bytes

# Each request is one commit and one file of 5 records (~3.4 KB); a segment of 600 bytes is sealed after a
# few requests (4 with these records): 12 rounds give every partition three segments of several files.
CONFIGS: dict[str, str | int] = {"segment.bytes": "600", "retention.ms": "-1"}


def _check_layout(uri: str) -> None:
    """Every file holds ascending offsets; the files of a segment do not overlap."""
    by_segment: dict[tuple[int, int], list[list[int]]] = {}
    for p, s, offsets in file_offsets(uri):
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (p, s, offsets)
        by_segment.setdefault((p, s), []).append(offsets)
    for key, files in by_segment.items():
        files.sort()
        for a, b in itertools.pairwise(files):
            assert a[-1] < b[0], (key, a, b)


def test_compaction_rewrites_small_files_sorted_and_changes_no_data(
    spark: SparkSession, warehouse: str
) -> None:
    topic = make_topic(warehouse, partitions=2, configs=CONFIGS, batches=rounds(2, 12, 5))
    before = table_rows(topic.uri)
    assert before.keys() == topic.produced.keys()
    files_p1 = {a["path"] for a in add_actions(topic.uri) if a["partition.partition"] == 1}
    assert len(add_actions(topic.uri)) == 24
    version = DeltaTable(topic.uri).version()

    # partition 0 only, files of ~10 records: segments 0 and 25 become a few sorted files each
    first = compact.run(
        spark,
        compact.CompactConfig(
            warehouse=warehouse, topics=("orders",), partitions=(0,), target_file_bytes=6800
        ),
    )
    [res] = first.topics
    assert res.commits == 1 and res.retries == 0
    assert res.files_before == 24 and res.files_after < 24
    assert res.records_removed == 0 and res.log_start_offsets == {0: 0, 1: 0}
    assert table_rows(topic.uri) == before
    assert {a["path"] for a in add_actions(topic.uri) if a["partition.partition"] == 1} == files_p1
    p0 = [(s, offs) for p, s, offs in file_offsets(topic.uri) if p == 0]
    assert 3 <= len(p0) < 12
    assert max(len(offs) for _, offs in p0) <= 12
    _check_layout(topic.uri)

    # the commit is a rearrangement: every file it adds or removes says dataChange=false
    after = DeltaTable(topic.uri)
    assert after.version() == version + 1
    actions = commit_actions(topic.uri, version + 1)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert isinstance(info, dict)
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert str(info["userMetadata"]).startswith("topiclake:compact:")
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert changes and all(isinstance(c, dict) and c["dataChange"] is False for c in changes)
    assert not any("txn" in a for a in actions)  # the high watermarks are untouched

    # then every partition with the default target: one file per segment
    second = compact.run(spark, compact.CompactConfig(warehouse=warehouse, topics=("orders",)))
    [res] = second.topics
    assert res.commits == 1
    n_segments = len({(p, s) for p, s, _ in file_offsets(topic.uri)})
    assert n_segments >= 6
    assert res.files_after == n_segments == len(add_actions(topic.uri))
    assert table_rows(topic.uri) == before
    _check_layout(topic.uri)
    line = second.summary()
    assert line.startswith("compact: orders: 2 partitions, files ")
    assert f"files {res.files_before} -> {n_segments}" in line and "log start 0:0 1:0" in line
    assert human_bytes(res.bytes_after) in line

    check_core_after_job(topic)
