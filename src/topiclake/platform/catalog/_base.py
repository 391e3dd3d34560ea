"""The topic catalog's rows (:class:`TopicInfo`, one change row per revision, their records) and the state of
a :class:`~.TopicCatalog` that its parts share. Split from :mod:`topiclake.platform.catalog`, which
re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from deltalake import DeltaTable

from topiclake.errors import InvalidPartitions
from topiclake.platform.catalog.system_objects import VersionMarker
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.platform.storage import Storage

#: Name of the catalog's system table below ``<warehouse>/_system``.
CATALOG_TABLE: Final = "topics"

#: Most partitions a topic may have.
MAX_PARTITIONS: Final = 10_000

#: How many times a change is re-validated and re-committed after losing against a concurrent commit.
_MAX_ATTEMPTS: Final = 8


def _app_id(name: str) -> str:
    return f"topiclake/catalog/{name}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class TopicInfo:
    """The state of one topic.

    Attributes:
        name: The topic's name.
        topic_id: A UUID that tells this topic apart from an earlier topic of the same name.
        partitions: Number of partitions.
        config: The topic's configs.
        created_ms: When the topic was created (epoch ms).
        updated_ms: When it last changed (epoch ms).
        revision: The catalog revision of this state; grows by one with every change of the name.
    """

    name: str
    topic_id: str
    partitions: int
    config: TopicConfig
    created_ms: int
    updated_ms: int
    revision: int


@dataclass(frozen=True)
class _Row:
    info: TopicInfo
    deleted: bool


def _check_partitions(partitions: int, topic: str) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitions(f"partitions must be an integer, got {partitions!r}", topic=topic)
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}",
            topic=topic,
            partitions=partitions,
        )


def _to_record(row: _Row) -> dict[str, object]:
    info = row.info
    return {
        "name": info.name,
        "topic_id": info.topic_id,
        "revision": info.revision,
        "partitions": info.partitions,
        "configs": json.dumps(info.config.overrides(), sort_keys=True),
        "created_ms": info.created_ms,
        "updated_ms": info.updated_ms,
        "deleted": row.deleted,
    }


def _from_record(record: Mapping[str, Any]) -> _Row:
    configs = json.loads(record["configs"] or "{}")
    info = TopicInfo(
        name=str(record["name"]),
        topic_id=str(record["topic_id"]),
        partitions=int(record["partitions"]),
        config=TopicConfig.from_kafka(configs),
        created_ms=int(record["created_ms"]),
        updated_ms=int(record["updated_ms"]),
        revision=int(record["revision"]),
    )
    return _Row(info=info, deleted=bool(record["deleted"]))


def _replace(info: TopicInfo, **changes: Any) -> TopicInfo:
    return dataclasses.replace(info, **changes)


# A change: given the current row of the name (None if the name never existed), return the row to append,
# or None when the change would alter nothing (then nothing is written).
_Change = Callable[[_Row | None], _Row | None]


class CatalogBase:
    """The attributes every part uses (set by ``TopicCatalog.__init__``) and, for the type
    checker, the methods one part calls on another."""

    _storage: Storage
    _uri: str
    _lock: threading.RLock
    _rows: dict[str, _Row]
    _loaded_version: int
    _dt: DeltaTable
    _marker: VersionMarker | None
