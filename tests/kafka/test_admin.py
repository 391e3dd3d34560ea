"""Admin over the Kafka protocol (confluent-kafka's AdminClient): partitions, configs, groups."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka_harness import KafkaGateway

from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition

pytestmark = pytest.mark.slow


def test_partitions_configs_and_groups(kafka: KafkaGateway) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("t", 2, 1, config={"retention.ms": "3600000"})])["t"].result(20)
    admin.create_partitions([NewPartitions("t", 5)])["t"].result(20)
    assert kafka.gw.broker.describe_topic("t").partitions == 5
    assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 5

    res = ConfigResource(ConfigResource.Type.TOPIC, "t")
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default

    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        "t",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([change])[change].result(20)
    cfg = kafka.gw.broker.describe_topic("t").config
    assert cfg.cleanup_policy == "compact,delete" and cfg.retention_ms == 604_800_000

    bad = ConfigResource(ConfigResource.Type.TOPIC, "t", set_config={"retention.ms": "soon"})
    with pytest.raises(Exception, match="retention"):
        admin.alter_configs([bad])[bad].result(20)

    # a group committed over Kafka is listed, described and deleted like any group
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g1"})
    try:
        c.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)
    finally:
        c.close()
    listed = admin.list_consumer_groups().result(20)
    assert "g1" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["g1"])["g1"].result(20)
    assert described.group_id == "g1" and not described.members
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g1"})
    try:
        c.commit(offsets=[TopicPartition("t", 1, 0)], asynchronous=False)
    finally:
        c.close()
    kp = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)  # kafka-python: OffsetDelete
    try:
        result = kp.delete_group_offsets("g1", [KTopicPartition("t", 0)])
        assert [e.errno for e in result.values()] == [0]
    finally:
        kp.close()
    assert set(kafka.gw.broker.groups.committed("g1")) == {("t", 1)}
    admin.delete_consumer_groups(["g1"])["g1"].result(20)
    assert "g1" not in {g.group_id for g in admin.list_consumer_groups().result(20).valid}
