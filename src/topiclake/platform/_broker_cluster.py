"""A broker's view of its cluster: its listeners, joining the cluster, leadership, metadata.

Split from :mod:`.broker`; outside a cluster the broker is the whole cluster and leads every partition.
"""

from __future__ import annotations

import logging

from topiclake.errors import TopicNotFound
from topiclake.platform._broker_base import BrokerBase
from topiclake.platform.cluster.metadata import BrokerEndpoint, ClusterMetadata, Endpoint, PartitionState
from topiclake.platform.cluster.node import ClusterNode, Leadership
from topiclake.platform.cluster.router import Router

logger = logging.getLogger("topiclake.platform.broker")  # one logger for all parts of the broker


class BrokerCluster(BrokerBase):
    """Listeners, cluster membership and metadata."""

    # ------------------------------------------------------------------ cluster view

    def advertise(self, endpoint: Endpoint) -> None:
        """Register a listener of this broker (``http``, ``kafka``, ...) under its advertised address."""
        with self._lock:
            self._listeners[endpoint.name] = endpoint

    def listeners(self) -> tuple[Endpoint, ...]:
        """The listeners registered so far, by name."""
        with self._lock:
            return tuple(self._listeners[name] for name in sorted(self._listeners))

    def endpoint(self) -> BrokerEndpoint:
        """This broker as metadata reports it (HTTP host and port default to 127.0.0.1:8082)."""
        listeners = self.listeners()
        http = next((e for e in listeners if e.name == "http"), Endpoint("http", "127.0.0.1", 8082))
        return BrokerEndpoint(self.config.broker_id, http.host, http.port, self.config.rack, listeners)

    def join_cluster(self) -> None:
        """Join the cluster of brokers over this warehouse (DESIGN.md §8).

        Registers this broker (refusing an id a live broker holds), takes part in controller election, and
        from then on leads only the partitions the controller gives it.

        Raises:
            BrokerIdInUse: A live broker already holds this broker id.
        """
        if self.cluster is not None:
            return
        node = ClusterNode(
            self.storage,
            self.config,
            self.catalog,
            self.cluster_id,
            self.endpoint,
            self._apply_leadership,
            self._sync_catalog,
        )
        node.start()
        self.cluster = node
        self.router = Router(node, self.forwarder, self.config.forward_timeout_ms)
        self._apply_leadership(node.leadership())

    def _apply_leadership(self, led: Leadership) -> None:
        for log in self.open_logs():
            mine = led.get(log.topic, {})
            if mine and max(mine) >= log.info.partitions:  # grown by another broker: adopt first
                self._sync_catalog()
            log.set_leadership(mine)

    def _sync_catalog(self) -> None:
        """Adopt what other brokers changed in the catalog: close the logs of deleted (or deleted and
        re-created) topics, grow and re-configure the others."""
        self.catalog.refresh()
        for log in self.open_logs():
            try:
                info = self.catalog.get(log.topic)
            except TopicNotFound:
                info = None
            if info is None or info.topic_id != log.info.topic_id:
                with self._lock:
                    if self._logs.get(log.topic) is log:
                        del self._logs[log.topic]
                gone = TopicNotFound(f"topic {log.topic!r} was deleted", topic=log.topic)
                log.close(abandon=gone)
                logger.info("topic %s: deleted by another broker; its log is closed here", log.topic)
            elif info != log.info:
                log.ensure_partitions(info)

    def metadata(self) -> ClusterMetadata:
        """Brokers, controller and the leader of every partition, as this broker knows them.

        Outside a cluster this broker is the whole cluster and leads every partition (epoch 0).
        """
        if self.cluster is not None:
            return self.cluster.metadata()
        me = self.config.broker_id
        partitions = {
            t.name: tuple(PartitionState(t.name, p, me, 0, (me,), (me,)) for p in range(t.partitions))
            for t in self.list_topics()
        }
        return ClusterMetadata(self.cluster_id, me, (self.endpoint(),), partitions)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Leader, epoch, replicas and ISR of one partition (this broker alone outside a cluster)."""
        if self.cluster is not None:
            state = self.cluster.partition(topic, partition)
            if state is not None:
                return state
        me = self.config.broker_id
        return PartitionState(topic, partition, me, 0, (me,), (me,))
