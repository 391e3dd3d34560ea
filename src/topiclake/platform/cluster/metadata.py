"""What every listener tells clients about the cluster: brokers, the controller, partition leaders.

These are plain values. The cluster subpackage keeps them current (brokers heartbeat into the warehouse, the
controller writes partition state); a broker outside a cluster (tests, library use) reports a cluster of one
in which it leads every partition. HTTP routes, the Kafka listener and the console read them through
:meth:`topiclake.platform.Broker.metadata`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """A listener clients can reach: ``name`` is ``http``, ``kafka`` or ``schema_registry``."""

    name: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker: its id, optional rack, and the listeners it advertises.

    ``host`` and ``port`` are those of the HTTP listener (what the REST Proxy API reports).
    """

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[Endpoint, ...] = ()

    def listener(self, name: str) -> Endpoint | None:
        """The advertised listener called ``name``, or None if this broker has none."""
        return next((e for e in self.listeners if e.name == name), None)


@dataclass(frozen=True)
class PartitionState:
    """Leadership of one partition as the controller last wrote it.

    ``replicas`` are the brokers allowed to lead it, preferred leader first; ``isr`` are those replicas whose
    broker is alive (with shared storage every live replica is in sync). ``leader`` is never -1 while a
    replica lives.
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterMetadata:
    """A consistent snapshot of the cluster as one broker sees it."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerEndpoint, ...]
    partitions: dict[str, tuple[PartitionState, ...]] = field(default_factory=dict)

    def broker(self, broker_id: int) -> BrokerEndpoint | None:
        """The live broker with this id, or None."""
        return next((b for b in self.brokers if b.broker_id == broker_id), None)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        """The state of one partition, or None if the controller has not assigned it yet."""
        states = self.partitions.get(topic, ())
        return states[partition] if 0 <= partition < len(states) else None
