"""The cluster: brokers over one warehouse, a controller, partition leaders (DESIGN.md §8)."""

from topiclake.platform.cluster.metadata import BrokerEndpoint, ClusterMetadata, Endpoint, PartitionState

__all__ = ["BrokerEndpoint", "ClusterMetadata", "Endpoint", "PartitionState"]
