"""The topic catalog on real Delta tables: changes, restarts, several brokers, races."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from topiclake.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    TopicExists,
    TopiclakeError,
    TopicNotFound,
)
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.storage import Storage
from topiclake.schemas import CATALOG_SCHEMA


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path))


@pytest.fixture
def catalog(storage: Storage) -> TopicCatalog:
    return TopicCatalog(storage)


def _table(storage: Storage) -> DeltaTable:
    return DeltaTable(storage.system_uri("topics"))


def _version(storage: Storage) -> int:
    return _table(storage).version()


def test_creates_the_table_with_schema_and_properties(storage: Storage) -> None:
    TopicCatalog(storage)
    dt = _table(storage)
    assert pa.schema(dt.schema().to_arrow()) == CATALOG_SCHEMA
    assert dt.metadata().configuration.get("delta.enableDeletionVectors") == "false"
    # Opening again does not create it again.
    version = dt.version()
    TopicCatalog(storage)
    assert _version(storage) == version


def test_create_get_list(catalog: TopicCatalog, storage: Storage) -> None:
    assert catalog.list() == []
    info = catalog.create("orders", partitions=3, configs={"retention.ms": "3600000"})
    assert isinstance(info, TopicInfo)
    assert info.name == "orders"
    assert info.partitions == 3
    assert info.config.retention_ms == 3600000
    assert info.revision == 1
    assert info.created_ms == info.updated_ms > 0
    assert len(info.topic_id) == 36
    catalog.create("audit")
    catalog.create("billing", partitions=2)
    assert [t.name for t in catalog.list()] == ["audit", "billing", "orders"]
    assert catalog.get("orders") == info
    assert catalog.exists("orders") and not catalog.exists("nope")
    # One appended row per change, with only overrides stored.
    rows = _table(storage).to_pyarrow_table().to_pylist()
    orders = [r for r in rows if r["name"] == "orders"]
    assert len(orders) == 1
    assert json.loads(orders[0]["configs"]) == {"retention.ms": "3600000"}
    assert orders[0]["deleted"] is False


def test_create_existing_raises(catalog: TopicCatalog, storage: Storage) -> None:
    catalog.create("orders")
    version = _version(storage)
    with pytest.raises(TopicExists):
        catalog.create("orders", partitions=5)
    assert _version(storage) == version
    assert catalog.get("orders").partitions == 1


def test_get_missing_and_invalid(catalog: TopicCatalog) -> None:
    with pytest.raises(TopicNotFound):
        catalog.get("missing")
    with pytest.raises(InvalidTopicName):
        catalog.get("../etc")
    with pytest.raises(TopicNotFound):
        catalog.delete("missing")
    with pytest.raises(TopicNotFound):
        catalog.alter_configs("missing", {"retention.ms": "1"})
    with pytest.raises(TopicNotFound):
        catalog.increase_partitions("missing", 3)


def test_delete_and_recreate(catalog: TopicCatalog, storage: Storage) -> None:
    first = catalog.create("orders", partitions=2, configs={"cleanup.policy": "compact"})
    last = catalog.delete("orders")
    assert last == first
    with pytest.raises(TopicNotFound):
        catalog.get("orders")
    assert catalog.list() == []
    with pytest.raises(TopicNotFound):
        catalog.delete("orders")
    again = catalog.create("orders")
    assert again.topic_id != first.topic_id
    assert again.revision == 3
    assert again.partitions == 1
    assert again.config == TopicConfig()  # no configs inherited from the deleted topic
    rows = _table(storage).to_pyarrow_table().to_pylist()
    assert sorted((r["revision"], r["deleted"]) for r in rows if r["name"] == "orders") == [
        (1, False),
        (2, True),
        (3, False),
    ]
    # A fresh catalog (restart) agrees.
    assert TopicCatalog(storage).get("orders") == again


def test_alter_configs(catalog: TopicCatalog, storage: Storage) -> None:
    catalog.create("orders", configs={"retention.ms": "1000", "cleanup.policy": "compact"})
    info = catalog.alter_configs("orders", set={"retention.bytes": "4096"}, delete=["cleanup.policy"])
    assert info.revision == 2
    assert info.config.overrides() == {"retention.ms": "1000", "retention.bytes": "4096"}
    assert info.updated_ms >= info.created_ms
    assert catalog.get("orders") == info
    # A change that changes nothing writes nothing.
    version = _version(storage)
    same = catalog.alter_configs("orders", set={"retention.ms": 1000})
    assert same == info
    assert _version(storage) == version


def test_increase_partitions(catalog: TopicCatalog, storage: Storage) -> None:
    created = catalog.create("orders", partitions=2)
    grown = catalog.increase_partitions("orders", 5)
    assert grown.partitions == 5
    assert grown.revision == 2
    assert grown.topic_id == created.topic_id
    assert grown.created_ms == created.created_ms
    version = _version(storage)
    for bad in (5, 4, 1, 0, 10_001):
        with pytest.raises(InvalidPartitions):
            catalog.increase_partitions("orders", bad)
    assert _version(storage) == version
    assert catalog.get("orders").partitions == 5


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "../x"}, InvalidTopicName),
        ({"name": "a/b"}, InvalidTopicName),
        ({"name": ""}, InvalidTopicName),
        ({"name": "x" * 250}, InvalidTopicName),
        ({"name": "é"}, InvalidTopicName),
        ({"name": "ok", "partitions": 0}, InvalidPartitions),
        ({"name": "ok", "partitions": -3}, InvalidPartitions),
        ({"name": "ok", "partitions": 10_001}, InvalidPartitions),
        ({"name": "ok", "configs": {"retention.msec": "1"}}, InvalidConfig),
        ({"name": "ok", "configs": {"retention.ms": "soon"}}, InvalidConfig),
        ({"name": "ok", "configs": {"segment.bytes": 13}}, InvalidConfig),
        ({"name": "ok", "configs": {"cleanup.policy": "keep"}}, InvalidConfig),
    ],
)
def test_bad_create_leaves_table_unchanged(
    catalog: TopicCatalog, storage: Storage, kwargs: dict[str, object], error: type[TopiclakeError]
) -> None:
    version = _version(storage)
    with pytest.raises(error):
        catalog.create(**kwargs)  # type: ignore[arg-type]
    assert _version(storage) == version
    assert catalog.list() == []
    assert not (Path(storage.root) / "topics").exists()


def test_bad_alter_leaves_table_unchanged(catalog: TopicCatalog, storage: Storage) -> None:
    catalog.create("orders")
    version = _version(storage)
    with pytest.raises(InvalidConfig):
        catalog.alter_configs("orders", set={"nope": "1"})
    with pytest.raises(InvalidConfig):
        catalog.alter_configs("orders", set={"retention.ms": "-7"})
    with pytest.raises(InvalidConfig):
        catalog.alter_configs("orders", delete=["nope"])
    with pytest.raises(InvalidConfig):
        # Bad configs are reported even for a topic that does not exist.
        catalog.alter_configs("missing", set={"nope": "1"})
    assert _version(storage) == version
    assert catalog.get("orders").config == TopicConfig()


def test_second_broker_sees_changes_after_refresh(storage: Storage) -> None:
    a = TopicCatalog(storage)
    b = TopicCatalog(storage)
    a.create("orders", partitions=2)
    with pytest.raises(TopicNotFound):
        b.get("orders")  # served from b's cache until it refreshes
    b.refresh()
    assert b.get("orders") == a.get("orders")
    a.increase_partitions("orders", 4)
    a.alter_configs("orders", {"retention.ms": "60000"})
    b.refresh()
    assert b.get("orders").partitions == 4
    assert b.get("orders").config.retention_ms == 60000
    a.delete("orders")
    b.refresh()
    assert b.list() == []
    # Restart: a brand-new catalog reads the same state.
    c = TopicCatalog(storage)
    assert c.list() == []
    b.create("orders")
    assert TopicCatalog(storage).get("orders") == b.get("orders")


def test_stale_broker_cannot_overwrite_a_newer_change(storage: Storage) -> None:
    a = TopicCatalog(storage)
    a.create("orders", partitions=2)
    b = TopicCatalog(storage)
    a.increase_partitions("orders", 6)
    # b still caches 2 partitions; its change is re-validated against the newest state, not its cache.
    with pytest.raises(InvalidPartitions):
        b.increase_partitions("orders", 4)
    assert b.get("orders").partitions == 6
    # An alter from the stale broker is applied on top of the newest state.
    info = b.alter_configs("orders", {"retention.ms": "5000"})
    assert info.partitions == 6
    assert info.revision == 3
    a.refresh()
    assert a.get("orders") == info
    # b deletes; a stale create from a must fail or create a new topic id, never resurrect the old one.
    b.delete("orders")
    recreated = a.create("orders")
    assert recreated.topic_id != info.topic_id
    assert recreated.revision == 5


def test_commit_fenced_when_another_broker_wins_between_refresh_and_commit(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = TopicCatalog(storage)
    b = TopicCatalog(storage)
    real_update = b._update_snapshot
    calls: list[int] = []

    def update_once_too_late() -> None:
        # The first refresh of b happens "before" a's commit: b decides on a stale snapshot.
        calls.append(1)
        if len(calls) > 1:
            real_update()

    monkeypatch.setattr(b, "_update_snapshot", update_once_too_late)
    won = a.create("orders", partitions=3)
    version = _version(storage)
    with pytest.raises(TopicExists):
        b.create("orders", partitions=7)
    assert len(calls) == 2  # the stale commit was rejected by the txn fence, then re-validated
    assert _version(storage) == version
    assert b.get("orders") == won

    # Same for an alter based on a stale revision: re-applied once on the newest state.
    calls.clear()
    a.increase_partitions("orders", 4)
    info = b.alter_configs("orders", {"retention.ms": "1000"})
    assert len(calls) == 2
    assert info.partitions == 4
    assert info.revision == 3
    assert info.config.retention_ms == 1000


def _race(storage: Storage, run: int, action: str) -> list[str]:
    cats = [TopicCatalog(storage), TopicCatalog(storage)]
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(2)

    def worker(cat: TopicCatalog) -> None:
        barrier.wait()
        try:
            if action == "create":
                cat.create(f"race-{run}", partitions=1)
            else:
                cat.increase_partitions("race", 2 + run)
            outcome = "ok"
        except (TopicExists, InvalidPartitions) as exc:
            outcome = exc.code
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(cat,)) for cat in cats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_two_brokers_racing_to_create_exactly_one_wins(storage: Storage) -> None:
    TopicCatalog(storage)
    for run in range(20):
        outcomes = _race(storage, run, "create")
        assert sorted(outcomes) == ["ok", "topic_exists"], (run, outcomes)
    final = TopicCatalog(storage)
    names = [t.name for t in final.list()]
    assert names == sorted(f"race-{i}" for i in range(20))
    rows = _table(storage).to_pyarrow_table().to_pylist()
    # One row per topic: the losers wrote nothing.
    assert len(rows) == 20
    assert all(t.revision == 1 for t in final.list())


def test_two_brokers_racing_to_grow_exactly_one_wins(storage: Storage) -> None:
    TopicCatalog(storage).create("race", partitions=1)
    for run in range(10):
        outcomes = _race(storage, run, "grow")
        # Both ask for the same count; exactly one applies it, the other finds it already there.
        assert sorted(outcomes) == ["invalid_partitions", "ok"], (run, outcomes)
    info = TopicCatalog(storage).get("race")
    assert info.partitions == 11
    assert info.revision == 11


def test_tables_created_concurrently(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    cats: list[TopicCatalog] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        try:
            cats.append(TopicCatalog(storage))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cats) == 4
    # Every handle can write, whichever create won.
    for i, cat in enumerate(cats):
        cat.create(f"t{i}")
    final = TopicCatalog(storage)
    assert [t.name for t in final.list()] == ["t0", "t1", "t2", "t3"]
