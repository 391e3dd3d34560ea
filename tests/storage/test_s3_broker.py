"""The broker over an S3 or Azure warehouse: produce, fetch, consumer groups, restart from the store alone."""

from __future__ import annotations

from store_harness import Warehouse

from topiclake.platform import Broker, BrokerConfig, Record, Storage


def _broker(store: Warehouse, **config: object) -> Broker:
    return Broker(Storage(store.uri, store.options), BrokerConfig(**{"linger_ms": 2, **config}))  # type: ignore[arg-type]


def test_produce_fetch_group_commit_and_restart_from_the_bucket(store: Warehouse) -> None:
    with _broker(store) as broker:
        broker.create_topic("orders", partitions=2)
        results = broker.produce(
            "orders", [Record(key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(20)]
        )
        assert all(r.error is None for r in results)
        by_partition: dict[int, list[int]] = {}
        for r in results:
            by_partition.setdefault(r.partition, []).append(r.offset)
        for p, offsets in by_partition.items():
            assert offsets == list(range(len(offsets)))
            batch = broker.fetch("orders", p, 0)
            assert batch.records.num_rows == len(offsets)
        broker.groups.commit("billing", None, -1, {("orders", 0): 3})
    with _broker(store) as again:
        assert [t.name for t in again.list_topics()] == ["orders"]
        assert again.groups.committed("billing")[("orders", 0)].offset == 3
        total = sum(again.fetch("orders", p, 0).records.num_rows for p in range(2))
        assert total == 20
        more = again.produce("orders", [Record(key=b"k0", value=b"after")])
        assert more[0].offset == len(by_partition[more[0].partition])


def test_delete_topic_removes_its_objects_and_keeps_its_neighbours(store: Warehouse) -> None:
    storage = Storage(store.uri, store.options)
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        for name in ("logs", "logs2"):  # "logs" is a prefix of "logs2": deleting one must not touch the other
            broker.create_topic(name, partitions=1)
            broker.produce(name, [Record(value=b"x")])
        broker.delete_topic("logs")
        assert not storage.is_table(storage.topic_uri("logs"))
        assert storage.is_table(storage.topic_uri("logs2"))
        assert broker.fetch("logs2", 0, 0).records.num_rows == 1
        broker.create_topic("logs", partitions=1)  # a new topic of the same name starts empty, at offset 0
        assert broker.produce("logs", [Record(value=b"y")])[0].offset == 0
