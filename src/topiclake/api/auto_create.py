"""Kafka's ``auto.create.topics.enable`` for HTTP produce: a topic that does not exist yet is created.

Every produce route (native ``/v1``, REST Proxy v2 and v3) asks :func:`ensure_topic` first. It costs a
dictionary look-up when the topic's log is open; otherwise it reads the catalog, and creates the topic
(``num_partitions`` partitions, the default replication factor) when the broker allows auto-creation and,
with auth on, the principal may Create on the cluster or the topic, as Kafka requires. When it may not,
or the setting is off, nothing happens and the route answers "topic not found" as before.
"""

from __future__ import annotations

import contextlib

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from topiclake.api.auth.access import access_of
from topiclake.errors import InvalidTopicName, TopicNotFound
from topiclake.platform import Broker
from topiclake.security import CLUSTER_NAME, Operation, ResourceType


def _create(broker: Broker, topic: str) -> None:
    try:
        broker.describe_topic(topic)
    except TopicNotFound:
        # a name no topic can have is not created: the route's own answer follows
        with contextlib.suppress(InvalidTopicName):
            broker.auto_create(topic)


async def ensure_topic(request: Request, broker: Broker, topic: str) -> None:
    """Create ``topic`` if it does not exist and auto-creation applies (see the module's docstring)."""
    if not broker.config.auto_create_topics_enable or broker.open_log(topic) is not None:
        return
    access = access_of(request.scope)
    if access.enforced and not (
        access.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        or access.allowed(Operation.CREATE, ResourceType.TOPIC, topic)
    ):
        return
    await run_in_threadpool(_create, broker, topic)


__all__ = ["ensure_topic"]
