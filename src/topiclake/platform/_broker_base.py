"""The state of a :class:`~topiclake.platform.broker.Broker` that its parts share (:mod:`._broker_cluster`,
:mod:`._broker_produce`): its attributes, set by ``Broker.__init__``, and the methods one part calls on
another, declared for the type checker. Split from :mod:`.broker`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from topiclake.errors import TopiclakeError
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.cluster.metadata import Endpoint
from topiclake.platform.cluster.node import ClusterNode
from topiclake.platform.cluster.router import Router
from topiclake.platform.cluster.routing import Forwarder
from topiclake.platform.config import BrokerConfig
from topiclake.platform.groups.group_coordinator import GroupCoordinator
from topiclake.platform.log.maintenance_thread import Maintenance
from topiclake.platform.log.topic_log import TopicLog
from topiclake.platform.partitioner import Partitioner
from topiclake.platform.storage import Storage


class BrokerBase:
    """What every part of a broker may use."""

    storage: Storage
    config: BrokerConfig
    catalog: TopicCatalog
    budget: MemoryBudget
    partitioner: Partitioner
    cluster: ClusterNode | None
    forwarder: Forwarder | None
    router: Router | None
    schema_check: Callable[[str, TopicConfig, pa.Table], list[TopiclakeError | None]] | None
    groups: GroupCoordinator
    _logs: dict[str, TopicLog]
    _lock: threading.Lock
    _closed: bool
    _listeners: dict[str, Endpoint]
    _maintenance: Maintenance | None

    if TYPE_CHECKING:  # defined by Broker or one of its parts; declared here for the others

        @property
        def cluster_id(self) -> str: ...

        def list_topics(self) -> list[TopicInfo]: ...

        def log(self, name: str) -> TopicLog: ...

        def open_logs(self) -> list[TopicLog]: ...

        def open_log(self, name: str) -> TopicLog | None: ...
