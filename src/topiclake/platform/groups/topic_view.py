"""The narrow view of a broker that consumer groups use: topics, their partitions and offsets, the warehouse.

The group coordinator and its helpers (``_group_admin``, ``_group_rules``) depend on :class:`TopicView`, not
on :class:`~topiclake.platform.broker.Broker`: the broker makes a coordinator, so the coordinator must not
know the broker back. Any object with these members serves; a :class:`~topiclake.platform.broker.Broker`
does.
"""

from __future__ import annotations

from typing import Literal, Protocol

from topiclake.platform.catalog import TopicInfo
from topiclake.platform.storage import Storage

#: What :meth:`TopicView.list_offsets` resolves: ``earliest``, ``latest`` or a timestamp (ms).
OffsetSpec = Literal["earliest", "latest"] | int


class TopicView(Protocol):
    """Topics and their offsets, as the group coordinator sees them."""

    @property
    def storage(self) -> Storage:
        """The warehouse (the coordinator keeps committed offsets in it)."""
        ...

    def list_topics(self) -> list[TopicInfo]:
        """All topics, by name."""
        ...

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic's catalog state (raises TopicNotFound)."""
        ...

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int | None:
        """``earliest`` (log start), ``latest`` (end), or the first offset at or after a timestamp (ms);
        None for a timestamp after the last record."""
        ...
