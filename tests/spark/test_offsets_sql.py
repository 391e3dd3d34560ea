"""``_system/consumer_offsets`` from outside the gateway: Spark and delta-rs read it with the documented
schema, and the lag query of docs/consuming.md gives the coordinator's lag."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from topiclake.platform import Broker, BrokerConfig, Record
from topiclake.platform.log.topic_log import partition_app_id
from topiclake.platform.storage import Storage
from topiclake.schemas.offsets import OFFSETS_SCHEMA, OFFSETS_TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "consuming.md"
TOPIC = "orders"
SIZES = {0: 10, 1: 5, 2: 0}  # records per partition; partition 2 stays empty

SPARK_SCHEMA = {
    "group": T.StringType(),
    "topic": T.StringType(),
    "partition": T.IntegerType(),
    "committed_offset": T.LongType(),
    "metadata": T.StringType(),
    "commit_timestamp": T.TimestampType(),
    "member_id": T.StringType(),
    "generation": T.IntegerType(),
    "commit_seq": T.LongType(),
}


def documented_lag_query(warehouse: str) -> str:
    """The Spark SQL lag query of docs/consuming.md, for this warehouse."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    lag = [b for b in blocks if "AS lag" in b]
    assert len(lag) == 1, "docs/consuming.md should hold exactly one SQL lag query"
    return lag[0].replace("<warehouse>", warehouse)


@pytest.fixture
def broker(warehouse: str) -> Iterator[Broker]:
    b = Broker(Storage(warehouse), BrokerConfig(linger_ms=2))
    try:
        yield b
    finally:
        b.close()


def _produce(broker: Broker, sizes: dict[int, int]) -> None:
    for p, n in sizes.items():
        if n:
            records = [Record(key=None, value=b"v%d" % i) for i in range(n)]
            results = broker.produce(TOPIC, records, partition=p)
            assert [r.error for r in results] == [None] * n


def test_offsets_table_schema_and_the_documented_lag_query(
    spark: SparkSession, warehouse: str, broker: Broker
) -> None:
    broker.create_topic(TOPIC, partitions=len(SIZES))
    _produce(broker, SIZES)
    groups = broker.groups
    # standalone ("simple") commits: no member, generation -1; a later commit supersedes an earlier one
    groups.commit("billing", None, -1, {(TOPIC, 0): (3, "first"), (TOPIC, 1): 5, (TOPIC, 2): 0})
    groups.commit("billing", None, -1, {(TOPIC, 0): (7, "second")})
    groups.commit("audit", None, -1, {(TOPIC, 0): 1})
    # a member's commit carries its id and generation
    joined = groups.join("members", topics=[TOPIC], session_timeout_ms=30_000)
    groups.commit("members", joined.member_id, joined.generation_id, {(TOPIC, 1): 2})
    groups.leave("members", joined.member_id)
    _produce(broker, {0: 4})  # the ends move after the commits: lag grows

    uri = broker.storage.system_uri(OFFSETS_TABLE)
    assert uri.endswith("/_system/consumer_offsets")

    # delta-rs: exactly the documented Arrow schema, one row per commit of a partition
    arrow = DeltaTable(uri).to_pyarrow_table()
    assert arrow.schema.remove_metadata() == OFFSETS_SCHEMA.remove_metadata()
    assert arrow.num_rows == 6
    member_rows = arrow.filter(pa.compute.equal(arrow["group"], "members")).to_pylist()
    assert [(r["member_id"], r["generation"]) for r in member_rows] == [
        (joined.member_id, joined.generation_id)
    ]
    simple = arrow.filter(pa.compute.equal(arrow["group"], "billing")).to_pylist()
    assert {(r["member_id"], r["generation"]) for r in simple} == {(None, -1)}
    assert sorted(arrow["commit_seq"].to_pylist()) == list(range(1, 7))

    # Spark: the same columns with the matching Spark types
    df = spark.read.format("delta").load(uri)
    assert {f.name: f.dataType for f in df.schema.fields} == SPARK_SCHEMA
    assert [f.name for f in df.schema.fields] == OFFSETS_SCHEMA.names
    assert df.count() == 6

    # the documented query: latest row per group/topic/partition, end = max(offset) + 1 per partition
    rows = spark.sql(documented_lag_query(warehouse)).collect()
    got = {(r["group"], r["topic"], r["partition"]): (r["committed_offset"], r["lag"]) for r in rows}
    expected = {
        (g, x.topic, x.partition): (x.committed_offset, x.lag)
        for g in ("audit", "billing", "members")
        for x in groups.lag(g)
    }
    assert got == expected
    assert got[("billing", TOPIC, 0)] == (7, 14 - 7)
    assert got[("audit", TOPIC, 0)] == (1, 13)
    assert got[("members", TOPIC, 1)] == (2, 3)
    assert got[("billing", TOPIC, 2)] == (0, 0)  # empty partition: no rows, lag 0

    # the table's max offset + 1 is the partition's high watermark when the partition is not empty
    topic_table = DeltaTable(broker.storage.topic_uri(TOPIC))
    ends = {r["partition"]: r["end_offset"] for r in rows if r["end_offset"] is not None}
    for p, end in ends.items():
        assert topic_table.transaction_version(partition_app_id(TOPIC, p)) == end
        assert broker.list_offsets(TOPIC, p, "latest") == end
    assert 2 not in ends
