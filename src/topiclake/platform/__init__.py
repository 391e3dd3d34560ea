"""The core: topic catalog, partition logs, offsets, partitioner. No HTTP, no Spark."""

from topiclake.platform.broker import Broker
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.catalog.topic_config import TopicConfig, validate_topic_name
from topiclake.platform.config import BrokerConfig
from topiclake.platform.groups.group_coordinator import GroupCoordinator
from topiclake.platform.log.topic_log import TopicLog, partition_app_id
from topiclake.platform.partitioner import Partitioner, murmur2, partition_for_key
from topiclake.platform.records import FetchResult, ProducerInfo, Record, RecordResult
from topiclake.platform.storage import Storage
from topiclake.platform.storage.leases import LogLease

__all__ = [
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
]
