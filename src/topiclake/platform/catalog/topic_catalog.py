"""The topic catalog: which topics exist, with how many partitions and which configs.

The catalog is the Delta table ``<warehouse>/_system/topics`` (:data:`~topiclake.schemas.CATALOG_SCHEMA`),
event-sourced: every change of a topic (create, alter, grow, delete) appends one row, and the row with the
highest ``revision`` per name is the topic's state. A row with ``deleted`` set means the topic is gone; a
later create of the same name gets a new ``topic_id`` and continues the revisions.

Several brokers may share one warehouse. Each commit carries a Delta ``txn`` action whose app id is
``topiclake/catalog/<name>`` and whose version is the row's revision. Before writing, a broker refreshes
its snapshot and checks that the txn version still equals the revision its change is based on; if another
broker commits a change of the same topic meanwhile, Delta's conflict check rejects the second commit
("Concurrent transaction failed"), the loser re-reads the table and re-validates its change. Two brokers
can therefore never both create the same topic, nor both apply changes based on the same revision.

Reads are served from an in-memory copy of the state; :meth:`TopicCatalog.refresh` re-reads the table.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Mapping

from topiclake.errors import InvalidPartitions, TopicExists, TopicNotFound
from topiclake.platform.catalog._base import (
    CATALOG_TABLE,
    MAX_PARTITIONS,
    TopicInfo,
    _check_partitions,
    _now_ms,
    _replace,
    _Row,
)
from topiclake.platform.catalog._table import CatalogTable
from topiclake.platform.catalog.topic_config import TopicConfig, validate_topic_name
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

__all__ = ["CATALOG_TABLE", "MAX_PARTITIONS", "TopicCatalog", "TopicInfo"]


class TopicCatalog(CatalogTable):
    """The topic catalog of one warehouse, backed by the Delta table ``_system/topics``.

    Thread-safe. Several catalogs (brokers) may share a warehouse; see the module docstring for how their
    changes are fenced.

    Args:
        storage: The warehouse. The catalog table is created if missing.

    Raises:
        StorageError: The table cannot be created, opened or read.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._uri = storage.system_uri(CATALOG_TABLE)
        self._lock = threading.RLock()
        self._rows: dict[str, _Row] = {}
        self._loaded_version = -1
        self._marker = None  # made on the first commit to an object store
        self._dt = self._open_or_create()
        self._load()

    def __repr__(self) -> str:
        return f"TopicCatalog({self._uri!r})"

    # -- reads -------------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The Delta version of the catalog table this catalog's state was read from."""
        with self._lock:
            return self._loaded_version

    def get(self, name: str) -> TopicInfo:
        """Return the state of a topic.

        Raises:
            InvalidTopicName: The name is not a legal topic name.
            TopicNotFound: No such topic (or it was deleted).
        """
        validate_topic_name(name)
        with self._lock:
            row = self._rows.get(name)
        if row is None or row.deleted:
            raise TopicNotFound(f"topic {name!r} does not exist", topic=name)
        return row.info

    def exists(self, name: str) -> bool:
        """Whether a topic of that name exists (False for an illegal name)."""
        with self._lock:
            row = self._rows.get(name)
        return row is not None and not row.deleted

    def list(self) -> list[TopicInfo]:
        """Return every existing topic, sorted by name."""
        with self._lock:
            rows = [row.info for row in self._rows.values() if not row.deleted]
        return sorted(rows, key=lambda info: info.name)

    def refresh(self) -> None:
        """Re-read the catalog table to see changes made by other brokers.

        Raises:
            StorageError: The table cannot be read.
        """
        with self._lock:
            self._update_snapshot()
            self._load_if_changed()

    # -- changes -----------------------------------------------------------------------------------------

    def create(
        self, name: str, partitions: int = 1, configs: Mapping[str, str | int] | None = None
    ) -> TopicInfo:
        """Create a topic.

        Args:
            name: The topic's name.
            partitions: Number of partitions, 1 to 10,000.
            configs: Kafka-named config overrides.

        Returns:
            The new topic's state.

        Raises:
            InvalidTopicName: The name is not a legal topic name.
            InvalidPartitions: ``partitions`` is out of range.
            InvalidConfig: A config is unknown or has a bad value.
            TopicExists: A topic of that name exists.
            CommitConflict: Concurrent changes kept winning; retry.
            StorageError: The table cannot be read or written.
        """
        validate_topic_name(name)
        _check_partitions(partitions, name)
        config = TopicConfig.from_kafka(configs)
        topic_id = str(uuid.uuid4())

        def change(current: _Row | None) -> _Row:
            if current is not None and not current.deleted:
                raise TopicExists(f"topic {name!r} already exists", topic=name)
            now = _now_ms()
            info = TopicInfo(
                name=name,
                topic_id=topic_id,
                partitions=partitions,
                config=config,
                created_ms=now,
                updated_ms=now,
                revision=(current.info.revision if current else 0) + 1,
            )
            return _Row(info=info, deleted=False)

        row = self._apply(name, change)
        logger.info(
            "created topic %s (id %s, %d partitions, revision %d)",
            name,
            topic_id,
            partitions,
            row.info.revision,
        )
        return row.info

    def delete(self, name: str) -> TopicInfo:
        """Mark a topic deleted. Deleting its data table is the broker's job.

        Returns:
            The topic's last state before the deletion.

        Raises:
            InvalidTopicName: The name is not a legal topic name.
            TopicNotFound: No such topic.
            CommitConflict: Concurrent changes kept winning; retry.
            StorageError: The table cannot be read or written.
        """
        validate_topic_name(name)
        before: list[TopicInfo] = []

        def change(current: _Row | None) -> _Row:
            info = self._live(name, current)
            before[:] = [info]
            return _Row(
                info=_replace(info, updated_ms=_now_ms(), revision=info.revision + 1),
                deleted=True,
            )

        row = self._apply(name, change)
        logger.info("deleted topic %s (id %s, revision %d)", name, row.info.topic_id, row.info.revision)
        return before[-1]

    def alter_configs(
        self,
        name: str,
        set: Mapping[str, str | int] | None = None,
        delete: Iterable[str] = (),
    ) -> TopicInfo:
        """Change a topic's configs incrementally: set some, reset others to their defaults.

        Args:
            name: The topic's name.
            set: Kafka-named configs to set.
            delete: Kafka names of configs to reset to their defaults.

        Returns:
            The topic's new state (unchanged, and nothing written, if the configs stay the same).

        Raises:
            InvalidTopicName: The name is not a legal topic name.
            TopicNotFound: No such topic.
            InvalidConfig: A config is unknown or has a bad value.
            CommitConflict: Concurrent changes kept winning; retry.
            StorageError: The table cannot be read or written.
        """
        validate_topic_name(name)
        to_set = dict(set or {})
        to_delete = list(delete)
        # Validate the request before touching storage: a bad config is an error even for a missing topic.
        TopicConfig().with_changes(to_set, to_delete)

        def change(current: _Row | None) -> _Row | None:
            info = self._live(name, current)
            config = info.config.with_changes(to_set, to_delete)
            if config == info.config:
                return None
            return _Row(
                info=_replace(info, config=config, updated_ms=_now_ms(), revision=info.revision + 1),
                deleted=False,
            )

        row = self._apply(name, change)
        logger.info("altered configs of topic %s (revision %d)", name, row.info.revision)
        return row.info

    def increase_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to ``partitions`` partitions (Kafka's CreatePartitions: the new total count).

        Raises:
            InvalidTopicName: The name is not a legal topic name.
            TopicNotFound: No such topic.
            InvalidPartitions: ``partitions`` is not more than the current count, or above 10,000.
            CommitConflict: Concurrent changes kept winning; retry.
            StorageError: The table cannot be read or written.
        """
        validate_topic_name(name)
        _check_partitions(partitions, name)

        def change(current: _Row | None) -> _Row:
            info = self._live(name, current)
            if partitions <= info.partitions:
                raise InvalidPartitions(
                    f"topic {name!r} has {info.partitions} partitions; the new count must be larger, "
                    f"got {partitions}",
                    topic=name,
                    partitions=partitions,
                    current=info.partitions,
                )
            return _Row(
                info=_replace(info, partitions=partitions, updated_ms=_now_ms(), revision=info.revision + 1),
                deleted=False,
            )

        row = self._apply(name, change)
        logger.info("topic %s now has %d partitions (revision %d)", name, partitions, row.info.revision)
        return row.info

    # -- internals ---------------------------------------------------------------------------------------

    @staticmethod
    def _live(name: str, current: _Row | None) -> TopicInfo:
        if current is None or current.deleted:
            raise TopicNotFound(f"topic {name!r} does not exist", topic=name)
        return current.info
