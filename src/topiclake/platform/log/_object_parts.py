"""What a topic log opens on object storage, and the table properties maintenance keeps it to (split from
:mod:`.topic_log`): the object-store append path (:mod:`.object_append`), the table state maintenance keeps
from its entries (:mod:`.object_state`), compaction's commit through it (:mod:`._object_compaction`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from topiclake.platform.config import BrokerConfig
from topiclake.platform.log._compaction_round import Rewrites
from topiclake.platform.log._object_compaction import commit_object_rewrites
from topiclake.platform.log.maintenance import TOMBSTONE_RETENTION_S, log_retention_property
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.log.object_state import ObjectTableState
from topiclake.platform.storage import Storage
from topiclake.platform.storage.azure_client import AzureClient
from topiclake.platform.storage.s3_client import ObjectClient, S3Client, s3_location
from topiclake.platform.storage.sharedkey import azure_location
from topiclake.schemas import TOPIC_TABLE_PROPERTIES

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log


def object_appender(
    topic: str, config: BrokerConfig, storage: Storage, version: int
) -> ObjectAppender | None:
    """The object-store append path (:mod:`.object_append`) when it applies: ``object_append`` and
    maintenance on (it checkpoints), an S3 or Azure warehouse whose conditional put the probe found
    honoured, and static keys (S3) or an account key (Azure) to sign requests with. None: delta-rs
    commits."""
    if storage.is_local or not (config.maintenance and config.object_append):
        return None
    deadline_s = max(120.0, config.request_timeout_ms / 1000)
    client: ObjectClient | None = None
    if (s3 := s3_location(storage.root, storage.storage_options)) is not None:
        client = S3Client(s3, deadline_s=deadline_s)
    elif (azure := azure_location(storage.root, storage.storage_options)) is not None:
        client = AzureClient(azure, deadline_s=deadline_s)
    if client is None or not storage.verify_commit_safety():
        if client is not None:
            client.close()
        logger.info("topic %s: commits through delta-rs (no keys, or no conditional put)", topic)
        return None
    fresh_s = config.log_retention_ms / 2000
    return ObjectAppender(client, f"topics/{topic}", version, fresh_s)


def object_state(fast: object) -> tuple[ObjectTableState, Callable[[int], bytes | None]] | None:
    """The table state maintenance keeps from the appender's entries on S3 (:mod:`.object_state`)."""
    if not isinstance(fast, ObjectAppender):
        return None
    return ObjectTableState(fast.client, fast.table_key), fast.take_entry


def object_rewrites(fast: object, hold: Callable[[], AbstractContextManager[None]]) -> Rewrites | None:
    """Compaction's commit on S3 through the flusher's appender (:mod:`._object_compaction`)."""
    if not isinstance(fast, ObjectAppender):
        return None
    return lambda version, rewrites: commit_object_rewrites(fast, hold, version, rewrites)


def object_tombstone_retention_s(config: BrokerConfig) -> int:
    """How long a topic table on object storage keeps tombstones: the vacuum retention and two vacuum
    intervals, so that every removed file's tombstone is still there when a (lite) vacuum, which finds
    files by their tombstones, comes to delete it (issue 28 item 4, docs/decisions.md)."""
    return config.vacuum_retention_hours * 3600 + 2 * config.vacuum_interval_ms // 1000


def table_properties(config: BrokerConfig, storage: Storage) -> dict[str, str]:
    """The properties a topic table is created with and kept to while maintenance is on."""
    props = dict(TOPIC_TABLE_PROPERTIES)
    props["delta.checkpointInterval"] = str(config.checkpoint_interval)
    if config.maintenance:
        props["delta.logRetentionDuration"] = log_retention_property(config.log_retention_ms)
        if storage.is_local and config.local_append:
            # compaction removes every appended file: a week of tombstones would swell each checkpoint
            # (the modification time keeps VACUUM's window instead: see _local_compaction.py)
            props["delta.deletedFileRetentionDuration"] = f"interval {TOMBSTONE_RETENTION_S} seconds"
        elif not storage.is_local:
            # a week of tombstones kept every compacted file in the bucket and in every checkpoint
            retention = object_tombstone_retention_s(config)
            props["delta.deletedFileRetentionDuration"] = f"interval {retention} seconds"
    else:
        props["delta.logRetentionDuration"] = "interval 30 days"
    return props
