"""Consumer groups and their offsets: the coordinator (membership, assignment, generation-fenced commits),
Kafka's assignors, and committed offsets in the Delta table ``_system/consumer_offsets``.

The coordinator sees a broker only through :class:`~.topic_view.TopicView`.
"""

from topiclake.platform.groups.group_coordinator import GroupCoordinator
from topiclake.platform.groups.offsets_store import CommittedOffset, OffsetsStore, TopicPartition
from topiclake.platform.groups.topic_view import TopicView

__all__ = ["CommittedOffset", "GroupCoordinator", "OffsetsStore", "TopicPartition", "TopicView"]
