"""The single source of truth for table and record schemas."""

from topiclake.schemas.catalog import CATALOG_SCHEMA, SYSTEM_TABLE_PROPERTIES
from topiclake.schemas.topic import (
    CREATE_TIME,
    HEADER_TYPE,
    HEADERS_TYPE,
    KAFKA_COLUMNS,
    KAFKA_SOURCE_DDL,
    LOG_APPEND_TIME,
    PARTITION_COLUMNS,
    TIMESTAMP_TYPE,
    TOPIC_SCHEMA,
    TOPIC_TABLE_PROPERTIES,
)

__all__ = [
    "CATALOG_SCHEMA",
    "CREATE_TIME",
    "HEADERS_TYPE",
    "HEADER_TYPE",
    "KAFKA_COLUMNS",
    "KAFKA_SOURCE_DDL",
    "LOG_APPEND_TIME",
    "PARTITION_COLUMNS",
    "SYSTEM_TABLE_PROPERTIES",
    "TIMESTAMP_TYPE",
    "TOPIC_SCHEMA",
    "TOPIC_TABLE_PROPERTIES",
]
