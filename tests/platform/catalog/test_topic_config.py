"""Topic names and topic configs: Kafka's rules, names and defaults."""

from __future__ import annotations

import dataclasses

import pytest

from topiclake.errors import InvalidConfig, InvalidTopicName
from topiclake.platform.catalog.topic_config import (
    CONFIG_DOCS,
    CONFIG_NAMES,
    DEFAULTS,
    TopicConfig,
    validate_topic_name,
)

# -- names -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "orders", "Orders.v2", "my_topic-1", "...", "a..b", "_confluent", "x" * 249, "0", ".a", "a."],
)
def test_valid_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\\b",
        "/abs",
        "x" * 250,
        "é",
        "a b",
        "a\x00",
        "a\n",
        "topic:1",
        "a*",
        "~",
        "%2e%2e",
        "s3://bucket",
        "\uff46\uff55\uff4c\uff4c",  # full-width "full": Unicode letters, not ASCII
    ],
)
def test_invalid_names_raise(name: str) -> None:
    with pytest.raises(InvalidTopicName) as info:
        validate_topic_name(name)
    assert "[a-zA-Z0-9._-]" in info.value.message
    assert "249" in info.value.message
    assert info.value.code == "invalid_topic_name"


def test_invalid_name_of_wrong_type() -> None:
    with pytest.raises(InvalidTopicName):
        validate_topic_name(None)  # type: ignore[arg-type]


# -- defaults ----------------------------------------------------------------------------------------------


def test_kafka_defaults() -> None:
    c = TopicConfig()
    assert c.retention_ms == 604800000
    assert c.retention_bytes == -1
    assert c.cleanup_policy == "delete"
    assert c.delete_retention_ms == 86400000
    assert c.min_compaction_lag_ms == 0
    assert c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime"
    assert c.segment_ms == 604800000
    assert c.segment_bytes == 1073741824
    assert c.min_insync_replicas == 1
    assert c.replication_factor == 1
    assert TopicConfig.from_kafka(None) == c
    assert TopicConfig.from_kafka({}) == c
    assert c.overrides() == {}
    assert c.is_deleting and not c.is_compacted


def test_defaults_and_docs_cover_every_config() -> None:
    assert set(DEFAULTS) == set(CONFIG_NAMES) == set(CONFIG_DOCS)
    assert DEFAULTS["retention.ms"] == "604800000"
    assert DEFAULTS["max.message.bytes"] == "1048588"
    assert DEFAULTS["cleanup.policy"] == "delete"
    assert all(isinstance(v, str) for v in DEFAULTS.values())
    assert all(doc and "\n" not in doc for doc in CONFIG_DOCS.values())
    assert len(CONFIG_NAMES) == len(dataclasses.fields(TopicConfig))


# -- from_kafka / to_kafka ---------------------------------------------------------------------------------


def test_from_kafka_accepts_strings_and_ints() -> None:
    c = TopicConfig.from_kafka(
        {
            "retention.ms": "3600000",
            "retention.bytes": 1024,
            "segment.bytes": " 1048576 ",
            "max.message.bytes": 0,
            "min.insync.replicas": "2",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert c.retention_ms == 3600000
    assert c.retention_bytes == 1024
    assert c.segment_bytes == 1048576
    assert c.max_message_bytes == 0
    assert c.min_insync_replicas == 2
    assert c.message_timestamp_type == "LogAppendTime"
    assert c.overrides() == {
        "retention.ms": "3600000",
        "retention.bytes": "1024",
        "segment.bytes": "1048576",
        "max.message.bytes": "0",
        "min.insync.replicas": "2",
        "message.timestamp.type": "LogAppendTime",
    }


def test_to_kafka_round_trips() -> None:
    c = TopicConfig.from_kafka({"retention.ms": -1, "cleanup.policy": "compact"})
    full = c.to_kafka()
    assert set(full) == set(CONFIG_NAMES)
    assert all(isinstance(v, str) for v in full.values())
    assert full["retention.ms"] == "-1"
    assert TopicConfig.from_kafka(full) == c
    assert TopicConfig.from_kafka(c.overrides()) == c
    assert c.get("cleanup.policy") == "compact"


def test_retention_forever() -> None:
    assert TopicConfig.from_kafka({"retention.ms": "-1"}).retention_ms == -1


@pytest.mark.parametrize(
    ("value", "normalised", "compacted", "deleting"),
    [
        ("delete", "delete", False, True),
        ("compact", "compact", True, False),
        ("compact,delete", "compact,delete", True, True),
        ("delete,compact", "compact,delete", True, True),
        ("delete, compact", "compact,delete", True, True),
        ("delete,delete", "delete", False, True),
    ],
)
def test_cleanup_policy(value: str, normalised: str, compacted: bool, deleting: bool) -> None:
    c = TopicConfig.from_kafka({"cleanup.policy": value})
    assert c.cleanup_policy == normalised
    assert c.is_compacted is compacted
    assert c.is_deleting is deleting
    assert TopicConfig(cleanup_policy=value).cleanup_policy == normalised


def test_unknown_config_names_the_key_and_lists_allowed() -> None:
    with pytest.raises(InvalidConfig) as info:
        TopicConfig.from_kafka({"retention.msec": "1"})
    assert "retention.msec" in info.value.message
    assert "retention.ms" in info.value.message
    assert "cleanup.policy" in info.value.message
    assert info.value.details["config"] == "retention.msec"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "abc"),
        ("retention.ms", "1.5"),
        ("retention.ms", ""),
        ("retention.ms", -2),
        ("retention.ms", "-2"),
        ("retention.ms", True),
        ("retention.ms", 1.0),
        ("retention.ms", str(2**63)),
        ("retention.bytes", -2),
        ("delete.retention.ms", -1),
        ("min.compaction.lag.ms", -1),
        ("max.message.bytes", -1),
        ("max.message.bytes", 2**31),
        ("segment.bytes", 13),
        ("segment.bytes", "0"),
        ("segment.ms", 0),
        ("min.insync.replicas", 0),
        ("replication.factor", 0),
        ("cleanup.policy", "remove"),
        ("cleanup.policy", ""),
        ("cleanup.policy", "compact,"),
        ("cleanup.policy", "Compact"),
        ("cleanup.policy", 1),
        ("message.timestamp.type", "createtime"),
        ("message.timestamp.type", "NoTime"),
    ],
)
def test_bad_values_raise(name: str, value: object) -> None:
    with pytest.raises(InvalidConfig) as info:
        TopicConfig.from_kafka({name: value})  # type: ignore[dict-item]
    assert name in info.value.message
    assert info.value.code == "invalid_config"


def test_minimums_are_accepted() -> None:
    c = TopicConfig.from_kafka(
        {
            "segment.bytes": 14,
            "retention.bytes": -1,
            "retention.ms": -1,
            "delete.retention.ms": 0,
            "max.message.bytes": 0,
            "segment.ms": 1,
        }
    )
    assert c.segment_bytes == 14
    assert c.segment_ms == 1


def test_direct_construction_is_validated() -> None:
    with pytest.raises(InvalidConfig):
        TopicConfig(retention_ms=-5)
    with pytest.raises(InvalidConfig):
        TopicConfig(cleanup_policy="nope")


def test_config_is_frozen() -> None:
    c = TopicConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.retention_ms = 1  # type: ignore[misc]


# -- with_changes ------------------------------------------------------------------------------------------


def test_with_changes_sets_and_resets() -> None:
    c = TopicConfig.from_kafka({"retention.ms": "1000", "cleanup.policy": "compact"})
    d = c.with_changes({"retention.bytes": "2048"}, delete=["cleanup.policy"])
    assert d.retention_ms == 1000
    assert d.retention_bytes == 2048
    assert d.cleanup_policy == "delete"
    assert d.overrides() == {"retention.ms": "1000", "retention.bytes": "2048"}
    # The original is unchanged.
    assert c.cleanup_policy == "compact"
    assert c.with_changes() == c
    assert c.with_changes(delete=["retention.ms", "cleanup.policy"]) == TopicConfig()


def test_with_changes_rejects_unknown_and_bad() -> None:
    c = TopicConfig()
    with pytest.raises(InvalidConfig):
        c.with_changes({"nope": "1"})
    with pytest.raises(InvalidConfig):
        c.with_changes(delete=["nope"])
    with pytest.raises(InvalidConfig):
        c.with_changes({"segment.bytes": "1"})
    with pytest.raises(InvalidConfig):
        c.with_changes({"retention.ms": "1"}, delete=["retention.ms"])
