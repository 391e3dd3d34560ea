"""Kafka's rack-aware replica placement: four real brokers on two racks (a, a, b, b), a topic created with
replication factor 2 over the Kafka protocol (confluent-kafka's AdminClient) has every partition on both
racks and its leaders spread over the four brokers, as a Kafka client sees it in Metadata."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from kafka_cluster import FAST_ENV, KafkaBroker, start_kafka_brokers

pytestmark = pytest.mark.slow

RACKS = ["a", "a", "b", "b"]


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[KafkaBroker]]:
    logs = tmp_path_factory.mktemp("kafka-racks")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in FAST_ENV.items():
            mp.setenv(k, v)
        brokers = start_kafka_brokers(logs / "wh", logs, 4, racks=RACKS)
        try:
            yield brokers
        finally:
            for b in brokers:
                b.proc.stop()


def test_replicas_of_every_partition_span_both_racks(racked: list[KafkaBroker]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": racked[0].bootstrap})
    admin.create_topics([NewTopic("racked", num_partitions=8, replication_factor=2)])["racked"].result(30)
    md = admin.list_topics("racked", timeout=30)
    assert len(md.brokers) == 4
    rack_of = {i + 1: r for i, r in enumerate(RACKS)}
    parts = md.topics["racked"].partitions
    assert len(parts) == 8
    for p in parts.values():
        assert len(p.replicas) == 2 and {rack_of[b] for b in p.replicas} == {"a", "b"}, p.replicas
        assert p.leader == p.replicas[0]
    assert set(Counter(p.leader for p in parts.values()).values()) == {2}  # 8 leaders over 4 brokers
