"""The public names of each subpackage are pinned: adding or removing one is a deliberate change here."""

from __future__ import annotations

import importlib

import pytest

PINNED: dict[str, list[str]] = {
    "topiclake.platform": [
        "Broker",
        "BrokerConfig",
        "FetchResult",
        "GroupCoordinator",
        "LogLease",
        "Partitioner",
        "ProducerInfo",
        "Record",
        "RecordResult",
        "Storage",
        "TopicCatalog",
        "TopicConfig",
        "TopicInfo",
        "TopicLog",
        "murmur2",
        "partition_app_id",
        "partition_for_key",
        "validate_topic_name",
    ],
    "topiclake.api": ["create_app"],
    "topiclake.client": [
        "Acks",
        "ArrowProduceResponse",
        "Assignor",
        "BrokerInfo",
        "ClusterView",
        "CommittedOffset",
        "Encoding",
        "FetchResponse",
        "FetchedRecord",
        "GatewayUnavailable",
        "GroupDescription",
        "GroupLag",
        "GroupListing",
        "GroupMember",
        "Header",
        "HeartbeatResponse",
        "JoinResponse",
        "Metadata",
        "Offsets",
        "PartitionLag",
        "PartitionOffsets",
        "ProduceResponse",
        "ProduceResult",
        "ProducerId",
        "ResetPlan",
        "ResetPlanEntry",
        "ResetTo",
        "Topic",
        "TopicPartition",
        "TopiclakeClient",
        "decode_bytes",
        "error_from_body",
        "parse_bootstrap_servers",
    ],
    "topiclake.console": ["mount", "register_decoder"],
    "topiclake.schemas": [
        "CATALOG_SCHEMA",
        "CREATE_TIME",
        "HEADERS_TYPE",
        "HEADER_TYPE",
        "KAFKA_COLUMNS",
        "KAFKA_SOURCE_DDL",
        "LOG_APPEND_TIME",
        "OFFSETS_SCHEMA",
        "OFFSETS_TABLE",
        "OFFSETS_TABLE_PROPERTIES",
        "PARTITION_COLUMNS",
        "SYSTEM_TABLE_PROPERTIES",
        "TIMESTAMP_TYPE",
        "TOPIC_SCHEMA",
        "TOPIC_TABLE_PROPERTIES",
    ],
    "topiclake.jobs": ["get_spark"],
    "topiclake.objectstore": [
        "LocalS3Server",
        "OPS",
        "ProxyProcess",
        "S3Proxy",
        "classify",
        "counting_endpoint",
        "prometheus_text",
    ],
    "topiclake.spark": ["register"],
    "topiclake.sparkenv": ["get_spark"],
    "topiclake.schema_registry": [
        "LEVELS",
        "ParsedSchema",
        "Reference",
        "RegisteredVersion",
        "SCHEMA_TYPES",
        "SchemaRegistry",
        "decode_wire",
        "encode_wire",
        "parse",
    ],
    "topiclake.kafka": ["KafkaListener", "KafkaListenerError", "SUPPORTED"],
}


@pytest.mark.parametrize("module", sorted(PINNED))
def test_public_names_are_pinned_and_importable(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == PINNED[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"
