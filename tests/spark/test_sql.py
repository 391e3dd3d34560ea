"""Topics as SQL tables: ``register_tables`` on the shared session (in-memory catalog).

Real broker, real Delta tables, real Spark: the tables answer the queries of docs/sql.md, registering commits
nothing to any table (the broker keeps appending), an ``acks=all`` record is in the very next query, the lag
view agrees with the coordinator, and time travel reaches earlier versions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from topiclake.platform import Broker, BrokerConfig, Record
from topiclake.platform.storage import Storage
from topiclake.schemas.offsets import OFFSETS_TABLE
from topiclake.spark import catalog as tl_catalog
from topiclake.spark.catalog import register_tables, table_name

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
KEYS = [b"alice", b"bob", b"carol"]


@pytest.fixture
def broker(warehouse: str) -> Iterator[Broker]:
    # maintenance off: its 10 s Delta log window would make time travel to early versions a race
    b = Broker(Storage(warehouse), BrokerConfig(linger_ms=2, maintenance=False))
    try:
        yield b
    finally:
        b.close()


def _produce(broker: Broker, topic: str, n: int, start: int = 0) -> list[tuple[int | None, int | None]]:
    """n keyed records, one second apart from BASE_MS + start seconds; returns (partition, offset)."""
    records = [
        Record(key=KEYS[i % len(KEYS)], value=b"v%d" % i, timestamp_ms=BASE_MS + 1000 * i)
        for i in range(start, start + n)
    ]
    results = broker.produce(topic, records)
    assert [r.error for r in results] == [None] * n
    return [(r.partition, r.offset) for r in results]


def _versions(broker: Broker) -> dict[str, tuple[int, list[str]]]:
    """Delta version and log entries of every topic table and of the offsets table."""
    uris = [broker.storage.topic_uri(t.name) for t in broker.list_topics()]
    uris.append(broker.storage.system_uri(OFFSETS_TABLE))
    return {
        u: (DeltaTable(u).version(), sorted(p.name for p in Path(u, "_delta_log").iterdir())) for u in uris
    }


def _tables(spark: SparkSession) -> set[str]:
    return {r["tableName"] for r in spark.sql("SHOW TABLES IN topiclake").collect() if not r["isTemporary"]}


def test_topics_are_tables_answering_the_documented_queries(
    spark: SparkSession, broker: Broker, warehouse: str
) -> None:
    broker.create_topic("orders", partitions=3)
    broker.create_topic("payments.v1-eu", partitions=1)
    _produce(broker, "orders", 30)
    _produce(broker, "payments.v1-eu", 4)

    result = register_tables(spark, warehouse)
    assert result.tables == {"orders": "topiclake.orders", "payments.v1-eu": "topiclake.payments_v1_eu"}
    assert result.consumer_offsets and not result.skipped
    assert _tables(spark) == {
        "orders",
        "payments_v1_eu",
        "consumer_offsets",
        "consumer_lag",
        "partition_offsets",
    }
    location = [
        r["data_type"]
        for r in spark.sql("DESCRIBE TABLE EXTENDED topiclake.payments_v1_eu").collect()
        if r["col_name"] == "Location"
    ]
    assert location == [f"file:{warehouse}/topics/payments.v1-eu"]

    # count per key
    rows = spark.sql(
        "SELECT CAST(key AS STRING) AS key, count(*) AS records FROM topiclake.orders GROUP BY 1 ORDER BY 1"
    ).collect()
    assert {r["key"]: r["records"] for r in rows} == {"alice": 10, "bob": 10, "carol": 10}

    # records in a time window (timestamps are UTC): seconds 5..14 of the day
    window = spark.sql(
        "SELECT CAST(value AS STRING) AS value FROM topiclake.orders "
        "WHERE timestamp >= TIMESTAMP'2026-01-01 00:00:05' AND timestamp < TIMESTAMP'2026-01-01 00:00:15'"
    ).collect()
    assert sorted(r["value"] for r in window) == sorted(f"v{i}" for i in range(5, 15))

    # a dotted, dashed topic name is its lower-case name with '_'
    assert table_name("payments.v1-eu") == "payments_v1_eu"
    topics = spark.sql("SELECT DISTINCT topic FROM topiclake.payments_v1_eu").collect()
    assert [r["topic"] for r in topics] == ["payments.v1-eu"]


def test_registering_commits_nothing_and_the_broker_keeps_appending(
    spark: SparkSession, broker: Broker, warehouse: str
) -> None:
    broker.create_topic("orders", partitions=2)
    _produce(broker, "orders", 6)
    broker.groups.commit("g", None, -1, {("orders", 0): 1})
    before = _versions(broker)

    register_tables(spark, warehouse)
    again = register_tables(spark, warehouse)  # idempotent: nothing created or dropped the second time
    assert again.created == [] and again.dropped == []
    assert _versions(broker) == before  # no Delta commit, not even a table property

    added = _produce(broker, "orders", 3, start=6)
    assert all(offset is not None for _, offset in added)
    assert spark.sql("SELECT count(*) AS n FROM topiclake.orders").collect()[0]["n"] == 9
    fetched = broker.fetch("orders", added[-1][0], added[-1][1], max_records=1)
    assert fetched.records.column("offset").to_pylist() == [added[-1][1]]


def test_an_acks_all_record_is_in_the_very_next_query(spark: SparkSession, warehouse: str) -> None:
    # the broker's own maintenance on: checkpoints, log cleanup and compaction run as in production
    with Broker(Storage(warehouse), BrokerConfig(linger_ms=2)) as broker:
        broker.create_topic("events", partitions=2)
        _produce(broker, "events", 5)
        register_tables(spark, warehouse)
        query = "SELECT partition, offset, CAST(value AS STRING) AS value FROM topiclake.events"
        seen = {(r["partition"], r["offset"]) for r in spark.sql(query).collect()}
        assert len(seen) == 5
        for i in range(3):  # the same session queried before each produce
            (result,) = broker.produce("events", [Record(key=b"k", value=b"new-%d" % i)], acks="all")
            assert result.error is None
            rows = spark.sql(query).collect()
            assert (result.partition, result.offset) in {(r["partition"], r["offset"]) for r in rows}
            assert f"new-{i}" in {r["value"] for r in rows}
            assert len(rows) == 6 + i


def test_lag_view_equals_the_coordinators_lag(spark: SparkSession, broker: Broker, warehouse: str) -> None:
    broker.create_topic("orders", partitions=3)
    broker.create_topic("other", partitions=1)
    for p, n in {0: 8, 1: 3}.items():  # partition 2 stays empty
        broker.produce("orders", [Record(value=b"x")] * n, partition=p)
    broker.produce("other", [Record(value=b"y")] * 2)
    groups = broker.groups
    groups.commit("billing", None, -1, {("orders", 0): 2, ("orders", 1): 3, ("orders", 2): 0})
    groups.commit("billing", None, -1, {("orders", 0): 5})  # supersedes the first commit of partition 0
    groups.commit("audit", None, -1, {("orders", 0): 1, ("other", 0): 1})
    broker.produce("orders", [Record(value=b"z")] * 4, partition=0)  # ends move after the commits

    register_tables(spark, warehouse)
    rows = spark.sql("SELECT * FROM topiclake.consumer_lag").collect()
    got = {
        (r["group"], r["topic"], r["partition"]): (r["committed_offset"], r["end_offset"], r["lag"])
        for r in rows
    }
    expected = {
        (g, x.topic, x.partition): (x.committed_offset, x.end_offset, x.lag)
        for g in ("billing", "audit")
        for x in groups.lag(g)
    }
    # a partition never written has no row, but its high watermark (0) was read at registration
    assert got[("billing", "orders", 2)] == expected[("billing", "orders", 2)] == (0, 0, 0)
    assert got == expected
    assert got[("billing", "orders", 0)] == (5, 12, 7)
    assert got[("audit", "other", 0)] == (1, 2, 1)


def test_time_travel_to_a_version_and_a_timestamp(
    spark: SparkSession, broker: Broker, warehouse: str
) -> None:
    broker.create_topic("orders", partitions=1)
    uri = broker.storage.topic_uri("orders")
    counts = {DeltaTable(uri).version(): 0}
    for i in range(2):  # one Delta commit per produce call
        _produce(broker, "orders", 2, start=2 * i)
        counts[DeltaTable(uri).version()] = 2 * (i + 1)
    register_tables(spark, warehouse)

    for version, n in counts.items():
        got = spark.sql(f"SELECT count(*) AS n FROM topiclake.orders VERSION AS OF {version}").collect()
        assert got[0]["n"] == n
    history = spark.sql("DESCRIBE HISTORY topiclake.orders").selectExpr(
        "version", "CAST(timestamp AS STRING) AS at"
    )
    at = {r["version"]: r["at"] for r in history.collect()}  # UTC, the session's time zone
    middle = sorted(counts)[1]  # the first produce: 2 of the 4 records
    got = spark.sql(f"SELECT count(*) AS n FROM topiclake.orders TIMESTAMP AS OF '{at[middle]}'").collect()
    assert got[0]["n"] == counts[middle] == 2


def test_deleted_topics_leave_and_new_ones_join(spark: SparkSession, broker: Broker, warehouse: str) -> None:
    for name in ("keep", "gone", "Mixed.Case", "mixed_case", "a.b", "a-b", "consumer_lag"):
        broker.create_topic(name, partitions=1)
        _produce(broker, name, 1)
    first = register_tables(spark, warehouse)
    # 'mixed_case' is its own table name and keeps it; 'a.b' and 'a-b' would both be a_b: neither gets it;
    # consumer_lag is the platform's view
    assert set(first.tables) == {"keep", "gone", "mixed_case"}
    assert set(first.skipped) == {"Mixed.Case", "a.b", "a-b", "consumer_lag"}
    assert "collides" in first.skipped["a.b"] and "reserved" in first.skipped["consumer_lag"]
    spark.sql("CREATE OR REPLACE VIEW topiclake.mine AS SELECT 1 AS one")  # a user's view stays

    broker.delete_topic("gone")
    broker.delete_topic("a-b")
    broker.create_topic("fresh", partitions=1)
    _produce(broker, "fresh", 2)
    second = register_tables(spark, warehouse)
    assert second.dropped == ["gone"]
    assert sorted(second.created) == ["a_b", "fresh"]
    assert set(second.tables) == {"keep", "mixed_case", "fresh", "a.b"}
    assert _tables(spark) == {
        "keep",
        "mixed_case",
        "fresh",
        "a_b",
        "consumer_offsets",
        "consumer_lag",
        "partition_offsets",
        "mine",
    }
    assert spark.sql("SELECT count(*) AS n FROM topiclake.fresh").collect()[0]["n"] == 2
    assert Path(broker.storage.topic_uri("keep"), "_delta_log").is_dir()  # dropping never deletes data
    spark.sql("DROP VIEW topiclake.mine")


def test_another_warehouse_replaces_the_tables(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    broker.create_topic("orders", partitions=1)
    _produce(broker, "orders", 3)
    register_tables(spark, broker.storage.root)
    other = tmp_path / "other"
    with Broker(Storage(str(other)), BrokerConfig(maintenance=False)) as b2:
        b2.create_topic("orders", partitions=1)
        _produce(b2, "orders", 1)
        result = register_tables(spark, str(other))
    assert result.dropped == ["consumer_offsets", "orders"] and "orders" in result.created
    assert spark.sql("SELECT count(*) AS n FROM topiclake.orders").collect()[0]["n"] == 1


def test_main_registers_into_a_named_database(spark: SparkSession, broker: Broker, warehouse: str) -> None:
    broker.create_topic("orders", partitions=1)
    _produce(broker, "orders", 2)
    args = tl_catalog.parser().parse_args(["--warehouse", warehouse, "--schema", "tl_main"])
    assert (args.database, args.catalog, args.local_catalog) == ("tl_main", None, None)
    try:
        # a session is running: main registers into its catalog (no local Derby metastore)
        assert tl_catalog.main(["--warehouse", warehouse, "--database", "tl_main"]) == 0
        assert spark.sql("SELECT count(*) AS n FROM tl_main.orders").collect()[0]["n"] == 2
        assert tl_catalog.main(["--warehouse", str(Path(warehouse) / "missing")]) == 1
    finally:
        spark.sql("DROP DATABASE IF EXISTS tl_main CASCADE")
        _restore_session(spark)


def _restore_session(spark: SparkSession) -> None:
    """Undo what get_spark(warehouse=...) set on the shared session."""
    from topiclake.spark import register

    spark.conf.unset("spark.topiclake.warehouse")
    spark.sparkContext.setLogLevel("WARN")
    register(spark)


def test_an_empty_warehouse_has_an_empty_lag_view(spark: SparkSession, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = register_tables(spark, str(empty), database="tl_empty")
    try:
        assert result.tables == {} and not result.consumer_offsets
        assert spark.sql("SELECT * FROM tl_empty.consumer_lag").collect() == []
        assert [f.name for f in spark.table("tl_empty.consumer_lag").schema.fields] == [
            "group",
            "topic",
            "partition",
            "committed_offset",
            "log_start_offset",
            "end_offset",
            "lag",
            "commit_timestamp",
        ]
    finally:
        spark.sql("DROP DATABASE IF EXISTS tl_empty CASCADE")
