"""Both ends of every partition in SQL (``partition_offsets``), and ``consumer_lag`` right after records
were removed down to an empty partition.

The retention job never deletes a partition's active segment, but a Kafka-style deletion of the last
segment, an operator's ``DELETE`` or any other removal can leave a partition without rows; its end is
then only the ``txn`` high watermark. The view takes it from the ends recorded after each job
(``_system/partition_offsets``) and from the high watermarks read at registration.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.jobs import retention
from topiclake.platform import Broker, BrokerConfig, Record
from topiclake.platform.log.partition_offsets import recorded_partition_offsets
from topiclake.platform.storage import Storage
from topiclake.spark.catalog import register_tables


@pytest.fixture
def broker(warehouse: str) -> Iterator[Broker]:
    b = Broker(Storage(warehouse), BrokerConfig(linger_ms=1, maintenance=False))
    try:
        yield b
    finally:
        b.close()


def _empty(broker: Broker, topic: str, partition: int) -> None:
    """Remove every record of a partition (a metadata delete of its segments), as retention of the last
    segment would; the high watermark (a ``txn`` action) stays."""
    DeltaTable(broker.storage.topic_uri(topic)).delete(f"partition = {partition}")


def _ends(spark: SparkSession) -> dict[int, tuple[int, int]]:
    rows = spark.sql("SELECT * FROM topiclake.partition_offsets WHERE topic = 'orders'").collect()
    return {r["partition"]: (r["log_start_offset"], r["end_offset"]) for r in rows}


def _lag(spark: SparkSession) -> dict[int, tuple[int, int, int]]:
    rows = spark.sql("SELECT * FROM topiclake.consumer_lag WHERE `group` = 'billing'").collect()
    return {r["partition"]: (r["committed_offset"], r["end_offset"], r["lag"]) for r in rows}


def test_lag_and_ends_after_a_partition_is_emptied(
    spark: SparkSession, broker: Broker, warehouse: str
) -> None:
    broker.create_topic("orders", partitions=3)
    broker.produce("orders", [Record(value=b"a")] * 5, partition=0)
    broker.produce("orders", [Record(value=b"b")] * 3, partition=1)
    broker.groups.commit("billing", None, -1, {("orders", 0): 2, ("orders", 1): 3, ("orders", 2): 0})
    # a retention run with nothing to delete still records both ends of every partition
    retention.run(spark, retention.RetentionConfig(warehouse=warehouse, topics=("orders",), vacuum=False))
    info = broker.describe_topic("orders")
    assert recorded_partition_offsets(broker.storage)[(info.topic_id, 0)] == (0, 5)

    _empty(broker, "orders", 0)
    register_tables(spark, warehouse)
    # partition 0: no rows, yet the end is its high watermark and the lag counts the removed records
    assert _ends(spark) == {0: (5, 5), 1: (0, 3), 2: (0, 0)}
    assert _lag(spark) == {0: (2, 5, 3), 1: (3, 3, 0), 2: (0, 0, 0)}
    gateway = {x.partition: (x.committed_offset, x.end_offset, x.lag) for x in broker.groups.lag("billing")}
    assert _lag(spark) == gateway

    # later, without registering again: partition 1 grows, is emptied, and a job records its ends
    broker.produce("orders", [Record(value=b"c")] * 4, partition=1)
    _empty(broker, "orders", 1)
    assert _ends(spark)[1] == (0, 3)  # nothing told SQL yet: the last known lower bound
    retention.run(spark, retention.RetentionConfig(warehouse=warehouse, topics=("orders",), vacuum=False))
    assert _ends(spark) == {0: (5, 5), 1: (7, 7), 2: (0, 0)}
    assert _lag(spark)[1] == (3, 7, 4)
    assert _lag(spark) == {
        x.partition: (x.committed_offset, x.end_offset, x.lag) for x in broker.groups.lag("billing")
    }

    # the recorded ends, as the topic's own time travel reads them (docs/sql.md): as of now, every record
    history = spark.sql(
        "SELECT partition, max(end_offset) AS end_offset FROM topiclake.partition_offsets_history "
        "WHERE topic = 'orders' AND recorded_at <= current_timestamp() GROUP BY partition"
    ).collect()
    assert {r["partition"]: r["end_offset"] for r in history} == {0: 5, 1: 7, 2: 0}
