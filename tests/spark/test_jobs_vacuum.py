"""The vacuum job: unreferenced data files go, a checkpoint is written and the Delta log trimmed (unless
another reader holds a log lease); the gateway's core appends and reads afterwards."""

from __future__ import annotations

from pathlib import Path

from _jobs_support import add_actions, check_core_after_job, make_topic, rounds, table_rows
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.jobs import vacuum
from topiclake.platform import Broker, BrokerConfig, LogLease


def _parquet_on_disk(uri: str) -> set[str]:
    return {
        p.relative_to(uri).as_posix()
        for p in Path(uri).rglob("*.parquet")
        if "_delta_log" not in p.relative_to(uri).parts
    }


def test_vacuum_deletes_unreferenced_files_and_trims_the_log(spark: SparkSession, warehouse: str) -> None:
    topic = make_topic(warehouse, partitions=2, batches=rounds(2, 8, 3))
    # a broker with maintenance on pins the topic's Delta log window to log_retention_ms (here 0 s)
    config = BrokerConfig(maintenance=True, log_retention_ms=0, maintenance_interval_ms=3_600_000)
    with Broker(topic.storage, config) as broker:
        broker.log("orders")
    assert (
        DeltaTable(topic.uri).metadata().configuration["delta.logRetentionDuration"] == "interval 0 seconds"
    )
    before = table_rows(topic.uri)
    DeltaTable(topic.uri).optimize.compact()  # 16 files -> 2, the 16 stay on disk unreferenced
    assert len(add_actions(topic.uri)) == 2 and len(_parquet_on_disk(topic.uri)) == 18
    log_dir = Path(topic.uri) / "_delta_log"

    # another reader's lease keeps the log whole (the checkpoint is still written)
    entries = len(list(log_dir.glob("*.json")))
    with LogLease(topic.storage, "orders", holder="a-reader"):
        assert vacuum.checkpoint_and_trim(topic.storage, "orders", None) == (entries, entries)
    assert (log_dir / "_last_checkpoint").exists()

    result = vacuum.run(
        spark, vacuum.VacuumConfig(warehouse=warehouse, topics=("orders",), retention_hours=0)
    )
    [res] = result.topics
    assert res.details["files_vacuumed"] == 16
    assert _parquet_on_disk(topic.uri) == {str(a["path"]) for a in add_actions(topic.uri)}
    assert res.files_before == res.files_after == 2
    logs_before, logs_after = (int(n) for n in str(res.details["log_entries"]).split(" -> "))
    assert logs_before >= entries and logs_after <= 2
    assert len(list(log_dir.glob("*.json"))) == logs_after
    assert table_rows(topic.uri) == before
    assert "files vacuumed 16" in result.summary()

    check_core_after_job(topic)
