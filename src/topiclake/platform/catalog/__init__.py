"""Topics and their configs: the catalog in ``_system/topics`` (:class:`TopicCatalog`, :class:`TopicInfo`),
topic names and Kafka's topic configs (:mod:`.topic_config`), and small whole-replaced system tables."""

from topiclake.platform.catalog.system_table import SmallSystemTable
from topiclake.platform.catalog.topic_catalog import CATALOG_TABLE, MAX_PARTITIONS, TopicCatalog, TopicInfo
from topiclake.platform.catalog.topic_config import TopicConfig, validate_topic_name

__all__ = [
    "CATALOG_TABLE",
    "MAX_PARTITIONS",
    "SmallSystemTable",
    "TopicCatalog",
    "TopicConfig",
    "TopicInfo",
    "validate_topic_name",
]
