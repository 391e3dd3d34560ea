"""The reprocessing job: a range of a topic, by offsets or by time, through a user's transformation into a
Delta table or another topic, exactly once per job id."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _jobs_support import BASE_TS, Topic, check_core_after_job, hwm, make_topic, rounds
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.errors import InvalidRequest, TopicNotFound
from topiclake.jobs import reprocess
from topiclake.platform import Record

TRANSFORMS = '''
"""Transformations for the reprocessing tests (imported by the job as MODULE:FUNCTION)."""
from pyspark.sql import functions as F


def upper(df):
    return df.select("topic", "partition", "offset", F.upper(F.col("value").cast("string")).alias("value"))


def rekey(df):
    # to a topic: key by the value's round, no explicit partition
    return df.select(F.col("value").alias("key"), F.concat(F.lit(b"copy:"), F.col("value")).alias("value"))


def broken(df):
    return df.select("no_such_column")


def not_a_frame(df):
    return 42
'''


@pytest.fixture
def transforms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A module of transformations on sys.path; returns its name."""
    name = f"tl_transforms_{request.node.name[:40].replace('[', '_').replace(']', '_')}"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{name}.py").write_text(textwrap.dedent(TRANSFORMS))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    return name


def _source(warehouse: str) -> Topic:
    # 2 partitions x 4 rounds x 5 records; round r has timestamps BASE_TS + r s, offsets 5r..5r+4
    return make_topic(warehouse, "orders", partitions=2, batches=rounds(2, 4, 5))


def test_reprocess_into_a_table_exactly_once(
    spark: SparkSession, warehouse: str, tmp_path: Path, transforms: str
) -> None:
    source = _source(warehouse)
    target = str(tmp_path / "upper")
    config = reprocess.ReprocessConfig(
        warehouse=warehouse,
        topics=("orders",),
        job_id="nightly-1",
        transform=f"{transforms}:upper",
        to_table=target,
        from_offset=5,
    )
    first = reprocess.run(spark, config)
    [res] = first.topics
    assert res.records_written == 30 and res.commits == 1 and res.skipped is None
    assert res.details["offsets"] == "orders/0:5-20 orders/1:5-20"
    rows = {
        (r["partition"], r["offset"]): r["value"] for r in spark.read.format("delta").load(target).collect()
    }
    assert rows == {k: v.decode().upper() for k, (_, v, _) in source.produced.items() if k[1] >= 5}
    dt = DeltaTable(target)
    assert dt.transaction_version("topiclake-reprocess-nightly-1") == 1
    version = dt.version()

    # the same job id again: nothing is written
    again = reprocess.run(spark, config)
    assert again.topics[0].skipped == "job nightly-1 already wrote table " + target
    assert DeltaTable(target).version() == version
    assert "skipped" in again.summary()

    # another job, by time, one partition: round 2 only (timestamps BASE+2 s .. BASE+2.004 s)
    by_time = reprocess.run(
        spark,
        reprocess.ReprocessConfig(
            warehouse=warehouse,
            topics=("orders",),
            job_id="nightly-2",
            transform=f"{transforms}:upper",
            to_table=target,
            partitions=(1,),
            from_timestamp=BASE_TS + 2000,
            to_timestamp=BASE_TS + 3000,
        ),
    )
    assert by_time.topics[0].records_written == 5
    assert by_time.topics[0].details["offsets"] == "orders/1:10-15"
    assert spark.read.format("delta").load(target).count() == 35


def test_reprocess_into_a_topic_exactly_once(spark: SparkSession, warehouse: str, transforms: str) -> None:
    _source(warehouse)
    copy = make_topic(warehouse, "copy", partitions=1)
    config = reprocess.ReprocessConfig(
        warehouse=warehouse,
        topics=("orders",),
        job_id="copy-1",
        transform=f"{transforms}:rekey",
        to_topic="copy",
    )
    first = reprocess.run(spark, config)
    [res] = first.topics
    assert res.records_written == 40 and res.log_start_offsets == {0: 0}
    assert hwm(copy.uri, "copy", 0) == 40
    values = sorted(DeltaTable(copy.uri).to_pyarrow_table(columns=["value"])["value"].to_pylist())
    assert len(values) == 40 and all(v.startswith(b"copy:v") for v in values)

    again = reprocess.run(spark, config)
    assert again.topics[0].skipped is not None
    assert hwm(copy.uri, "copy", 0) == 40

    # the gateway's core goes on appending to the target after the job's write
    rows = DeltaTable(copy.uri).to_pyarrow_table(columns=["offset", "key", "value"]).to_pylist()
    copy.produced = {(0, r["offset"]): (r["key"], r["value"], 0) for r in rows}
    check_core_after_job(copy)


def test_reprocess_rejects_bad_transformations_and_targets(
    spark: SparkSession, warehouse: str, tmp_path: Path, transforms: str
) -> None:
    make_topic(warehouse, "orders", partitions=1, batches=[(0, [Record(key=b"k", value=b"v")])])
    base = {"warehouse": warehouse, "topics": ("orders",), "job_id": "bad", "to_table": str(tmp_path / "t")}
    cases = {
        "nope_no_such_module:f": "cannot import module 'nope_no_such_module'",
        f"{transforms}:missing": f"module '{transforms}' has no 'missing'",
        "no-colon": "must be MODULE:FUNCTION",
        f"{transforms}:broken": "failed: AnalysisException",
        f"{transforms}:not_a_frame": "returned int, not a DataFrame",
    }
    for spec, message in cases.items():
        with pytest.raises(InvalidRequest, match=message):
            reprocess.run(spark, reprocess.ReprocessConfig(**base, transform=spec))  # type: ignore[arg-type]
    assert not Path(tmp_path / "t").exists()
    with pytest.raises(TopicNotFound):
        reprocess.ReprocessConfig(**{**base, "to_table": None}, to_topic="nowhere").check()  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="exactly one of --to-topic and --to-table"):
        reprocess.ReprocessConfig(**base, to_topic="orders").check()  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="not both"):
        reprocess.ReprocessConfig(**base, from_offset=1, to_timestamp=5).check()  # type: ignore[arg-type]
