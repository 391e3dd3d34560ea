"""A broker: the topic catalog plus the logs of the partitions it leads, behind one typed API.

This is what the HTTP gateway, the CLI and the tests talk to. It holds no HTTP and no Spark.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping

import pyarrow as pa

from topiclake.errors import (
    BrokerClosed,
    InvalidRecord,
    InvalidReplicationFactor,
    NotLeader,
    TopicExists,
    TopiclakeError,
    TopicNotFound,
)
from topiclake.platform._broker_cluster import BrokerCluster
from topiclake.platform._broker_produce import BrokerProduce
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.cluster.metadata import Endpoint
from topiclake.platform.cluster.node import ClusterNode
from topiclake.platform.cluster.router import Router
from topiclake.platform.cluster.routing import Forwarder
from topiclake.platform.config import BrokerConfig
from topiclake.platform.groups.group_coordinator import GroupCoordinator
from topiclake.platform.groups.topic_view import OffsetSpec
from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.platform.log.maintenance_thread import Maintenance
from topiclake.platform.log.topic_log import TopicLog
from topiclake.platform.partitioner import Partitioner
from topiclake.platform.records import FetchResult
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

__all__ = ["Broker", "OffsetSpec"]


class Broker(BrokerCluster, BrokerProduce):
    """One broker over a warehouse: topics admin, produce, fetch, list offsets.

    Args:
        storage: The warehouse.
        config: Broker tuning; defaults if omitted.
        forwarder: How to reach other brokers of the cluster (the gateway supplies an HTTP one); with
            it, produce and fetch for partitions another broker leads are forwarded there.
    """

    def __init__(
        self, storage: Storage, config: BrokerConfig | None = None, *, forwarder: Forwarder | None = None
    ) -> None:
        self.storage = storage
        storage.verify_commit_safety()  # object storage: refuse a store that cannot fence two writers
        self.config = config or BrokerConfig()
        self.catalog = TopicCatalog(storage)
        self.budget = MemoryBudget(self.config.buffer_max_bytes)
        self.file_cache = SmallFileCache(self.config.read_cache_bytes)  # shared by the topics' reads
        self.partitioner = Partitioner()
        self._logs: dict[str, TopicLog] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._listeners: dict[str, Endpoint] = {}
        self.cluster: ClusterNode | None = None
        self.forwarder = forwarder
        self.router: Router | None = None
        #: Checks records of topics with ``confluent.*.schema.validation=true`` (set by the schema
        #: registry's owner): one error or None per row of the input table.
        self.schema_check: Callable[[str, TopicConfig, pa.Table], list[TopiclakeError | None]] | None = None
        self.groups = GroupCoordinator(self)
        self._maintenance: Maintenance | None = None
        if self.config.maintenance:
            self._maintenance = Maintenance(lambda: [log.maintainer for log in self.open_logs()], self.config)
            self._maintenance.start()
        logger.info("broker %d serving warehouse %s", self.config.broker_id, storage.root)

    @property
    def cluster_id(self) -> str:
        """A stable id of the cluster: every broker over the same warehouse reports the same one."""
        digest = hashlib.sha256(self.storage.root.encode()).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    # ------------------------------------------------------------------ admin

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str | int] | None = None
    ) -> TopicInfo:
        """Create a topic and its table; in a cluster, wait until the controller has given it leaders.

        In a cluster, a topic created without ``replication.factor`` gets ``default_replication_factor``
        capped at the live brokers; one asking for more replicas than live brokers is refused.
        """
        configs = dict(configs or {})
        if self.cluster is not None:
            live = len(self.cluster.metadata().brokers) or 1
            if "replication.factor" in configs:
                rf = int(configs["replication.factor"])
                if rf > live:
                    raise InvalidReplicationFactor(
                        f"replication factor {rf} is larger than the number of live brokers ({live})",
                        topic=name,
                        replication_factor=rf,
                        live_brokers=live,
                    )
            else:
                configs["replication.factor"] = min(self.config.default_replication_factor, live)
        info = self.catalog.create(name, partitions, configs)
        self.log(name)
        self._await_leaders(name, partitions)
        logger.info("created topic %s with %d partitions", name, partitions)
        return info

    def auto_create(self, name: str) -> TopicInfo | None:
        """Kafka's ``auto.create.topics.enable``: the topic, created now with ``num_partitions`` partitions
        (and the default replication factor) if it did not exist; None when the setting is off.

        The caller checks that the client may create it. Two brokers creating it at once both get it.

        Raises:
            InvalidTopicName: The name is not a legal topic name (nothing is created).
        """
        if not self.config.auto_create_topics_enable:
            return None
        try:
            return self.describe_topic(name)
        except TopicNotFound:
            pass
        try:
            info = self.create_topic(name, self.config.num_partitions)
        except TopicExists:  # created by another request or broker meanwhile
            return self.describe_topic(name)
        logger.info("topic %s: auto-created (auto.create.topics.enable)", name)
        return info

    def _await_leaders(self, name: str, partitions: int) -> None:
        node = self.cluster
        if node is not None:
            node.poke()
            if not node.wait_for(lambda: node.partition(name, partitions - 1) is not None, 10.0):
                logger.warning("topic %s: no leaders assigned within 10 s; the controller will", name)

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic's catalog state (raises TopicNotFound)."""
        return self.catalog.get(name)

    def list_topics(self) -> list[TopicInfo]:
        """All topics, by name."""
        return self.catalog.list()

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic: its catalog entry and then its table's data."""
        info = self.catalog.delete(name)
        with self._lock:
            log = self._logs.pop(name, None)
        if log is not None:
            log.close()
        self.storage.delete_tree(self.storage.topic_uri(name))
        logger.info("deleted topic %s", name)
        return info

    def alter_topic_configs(
        self, name: str, set: Mapping[str, str | int] | None = None, delete: Iterable[str] = ()
    ) -> TopicInfo:
        """Change topic configs (``delete`` resets to defaults)."""
        info = self.catalog.alter_configs(name, set, delete)
        self._adopt(info)
        return info

    def increase_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to ``partitions`` partitions (never shrink)."""
        info = self.catalog.increase_partitions(name, partitions)
        self._adopt(info)
        self._await_leaders(name, partitions)
        return info

    def _adopt(self, info: TopicInfo) -> None:
        with self._lock:
            log = self._logs.get(info.name)
        if log is not None:
            log.ensure_partitions(info)

    def open_logs(self) -> list[TopicLog]:
        """The topic logs opened so far (for metrics)."""
        with self._lock:
            return list(self._logs.values())

    def open_log(self, name: str) -> TopicLog | None:
        """The log of a topic if it is open already (never reads the table), else None."""
        with self._lock:
            return None if self._closed else self._logs.get(name)

    def log(self, name: str) -> TopicLog:
        """The open log of a topic, opened (and its state recovered from the table) on first use."""
        with self._lock:
            if self._closed:
                raise BrokerClosed("broker is closed")
            log = self._logs.get(name)
            if log is not None:
                return log
        try:
            info = self.catalog.get(name)
        except TopicNotFound:
            self.catalog.refresh()  # created by another broker since we last looked?
            info = self.catalog.get(name)
        with self._lock:
            log = self._logs.get(name)
            if log is None:
                log = TopicLog(self.storage, info, self.config, self.budget, self.file_cache)
                self._logs[name] = log
                opened = True
            else:
                opened = False
        if opened and self.cluster is not None:
            log.set_leadership(self.cluster.leadership().get(name, {}))
        return log

    # ------------------------------------------------------------------ read

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1024 * 1024,
        wait_ms: float = 0,
    ) -> FetchResult:
        """Committed records of one partition from ``offset`` on (see :meth:`TopicLog.fetch`)."""
        if max_records < 1 or max_bytes < 1:
            raise InvalidRecord("max_records and max_bytes must be at least 1")
        log = self.log(topic)
        if self.cluster is None or log.leads(partition):
            try:
                return log.fetch(partition, offset, max_records, max_bytes, wait_ms)
            except NotLeader:
                if self.cluster is None:
                    raise
        log.high_watermark(partition)  # an unknown partition is still an error of its own
        return self._route(
            topic,
            partition,
            lambda: log.fetch(partition, offset, max_records, max_bytes, wait_ms),
            lambda t: self._remote().fetch(t, topic, partition, offset, max_records, max_bytes, wait_ms),
        )

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int | None:
        """``earliest`` (log start), ``latest`` (end), or the first offset at or after a timestamp (ms).

        For a timestamp after the last record, returns None (Kafka answers -1).
        """
        log = self.log(topic)
        if self.cluster is not None and not log.leads(partition):
            log.high_watermark(partition)  # an unknown partition is still an error of its own
            # the router may find this broker the leader before its log has taken the partition over:
            # answer from the log then (not through list_offsets again, which would route again, forever)
            return self._route(
                topic,
                partition,
                lambda: _log_offsets(log, topic, partition, spec),
                lambda t: self._remote().list_offsets(t, topic, partition, spec),
            )
        return _log_offsets(log, topic, partition, spec)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Commit what is pending, close every topic log, and leave the cluster."""
        if self._maintenance is not None:
            self._maintenance.close()
        self.groups.close()
        with self._lock:
            self._closed = True
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.router is not None:
            self.router.close()
        logger.info("broker %d closed", self.config.broker_id)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log_offsets(log: TopicLog, topic: str, partition: int, spec: OffsetSpec) -> int | None:
    """:meth:`Broker.list_offsets` answered from this broker's own log."""
    if spec == "earliest":
        return log.log_start_offset(partition)
    if spec == "latest":
        return log.high_watermark(partition)
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec == -2:
            return log.log_start_offset(partition)
        if spec == -1:
            return log.high_watermark(partition)
        if spec < 0:
            raise InvalidRecord(f"timestamp {spec} is negative", topic=topic, partition=partition)
        return log.offset_for_timestamp(partition, spec)
    raise InvalidRecord(f"offset spec must be earliest, latest or a timestamp in ms, not {spec!r}")
