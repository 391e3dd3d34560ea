"""The state of a :class:`~.group_coordinator.GroupCoordinator` that its parts share.

Split from :mod:`.group_coordinator`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from topiclake.platform.groups._state import Group
from topiclake.platform.groups.offsets_store import OffsetsStore
from topiclake.platform.groups.topic_view import TopicView


class GroupBase:
    """The attributes every part uses (set by ``GroupCoordinator.__init__``) and, for the type
    checker, the methods one part calls on another."""

    broker: TopicView
    store: OffsetsStore
    foreign_groups: Callable[[str], bool] | None
    _min_session: int
    _max_session: int
    _commit_timeout_s: float
    _lock: threading.RLock
    _groups: dict[str, Group]

    if TYPE_CHECKING:  # defined by the class or one of its parts

        def _check_foreign(self, group_id: str) -> None: ...

        def _group(self, group_id: str) -> Group: ...
