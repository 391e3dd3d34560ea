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

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from topiclake.errors import (
    CommitConflict,
    InvalidPartitions,
    StorageError,
    TopicExists,
    TopicNotFound,
)
from topiclake.platform.storage import Storage
from topiclake.platform.topic_config import TopicConfig, validate_topic_name
from topiclake.schemas import CATALOG_SCHEMA, SYSTEM_TABLE_PROPERTIES

logger = logging.getLogger(__name__)

__all__ = ["CATALOG_TABLE", "MAX_PARTITIONS", "TopicCatalog", "TopicInfo"]

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


class TopicCatalog:
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

    def _apply(self, name: str, change: _Change) -> _Row:
        """Append the row ``change`` derives from the freshest state of ``name``, fenced by its txn."""
        app_id = _app_id(name)
        with self._lock:
            for attempt in range(1, _MAX_ATTEMPTS + 1):
                self._update_snapshot()
                self._load_if_changed()
                current = self._rows.get(name)
                base = current.info.revision if current else 0
                fence = self._txn_version(app_id)
                if fence != base:
                    # The snapshot holds a change of this topic the state does not show: reload everything.
                    logger.warning(
                        "catalog state of %s at revision %d but its txn is at %d; reloading",
                        name,
                        base,
                        fence,
                    )
                    self._load()
                    continue
                row = change(current)
                if row is None:
                    assert current is not None
                    return current
                try:
                    self._commit(row)
                except CommitFailedError as exc:
                    logger.info(
                        "catalog change of %s based on revision %d lost a race (attempt %d): %s",
                        name,
                        base,
                        attempt,
                        exc,
                    )
                    continue
                return row
        raise CommitConflict(
            f"could not change topic {name!r}: concurrent catalog changes won {_MAX_ATTEMPTS} times",
            topic=name,
        )

    def _commit(self, row: _Row) -> None:
        """Append one row with its txn fence; update the in-memory state on success."""
        info = row.info
        table = pa.Table.from_pylist([_to_record(row)], schema=CATALOG_SCHEMA)
        props = CommitProperties(
            app_transactions=[Transaction(_app_id(info.name), info.revision, last_updated=_now_ms())]
        )
        before = self._dt.version()
        try:
            write_deltalake(self._dt, table, mode="append", commit_properties=props)
        except CommitFailedError:
            raise
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot write the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        after = self._dt.version()
        self._rows[info.name] = row
        if after == before + 1 and self._loaded_version == before:
            self._loaded_version = after
        else:
            # The commit was rebased over other commits this state has not read yet.
            self._load()
        try:
            self._storage.sync_commit(self._uri, after)
        except OSError as exc:
            raise StorageError(f"cannot fsync the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        logger.debug("catalog commit %d: %s revision %d", after, info.name, info.revision)

    def _txn_version(self, app_id: str) -> int:
        try:
            version = self._dt.transaction_version(app_id)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot read the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        return 0 if version is None else int(version)

    def _open_or_create(self) -> DeltaTable:
        options = self._storage.options()
        try:
            if self._storage.is_table(self._uri):
                return DeltaTable(self._uri, storage_options=options)
            try:
                dt = DeltaTable.create(
                    self._uri,
                    CATALOG_SCHEMA,
                    mode="error",
                    name="topiclake_topics",
                    configuration=SYSTEM_TABLE_PROPERTIES,
                    storage_options=options,
                )
                logger.info("created topic catalog %s", self._uri)
                return dt
            except DeltaError as exc:
                # Another broker created it first: open theirs.
                logger.info("topic catalog %s created concurrently (%s); opening it", self._uri, exc)
                if not self._storage.is_table(self._uri):
                    raise
                return DeltaTable(self._uri, storage_options=options)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot open the topic catalog {self._uri}: {exc}", uri=self._uri) from exc

    def _update_snapshot(self) -> None:
        try:
            self._dt.update_incremental()
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot refresh the topic catalog {self._uri}: {exc}", uri=self._uri) from exc

    def _load_if_changed(self) -> None:
        if self._dt.version() != self._loaded_version:
            self._load()

    def _load(self) -> None:
        """Rebuild the state from the snapshot: the row with the highest revision per name."""
        try:
            version = self._dt.version()
            table = self._dt.to_pyarrow_table()
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot read the topic catalog {self._uri}: {exc}", uri=self._uri) from exc
        newest: dict[str, dict[str, Any]] = {}
        for record in table.to_pylist():
            name = record["name"]
            seen = newest.get(name)
            if seen is None or record["revision"] > seen["revision"]:
                newest[name] = record
        self._rows = {name: _from_record(record) for name, record in newest.items()}
        self._loaded_version = version
        logger.debug("loaded topic catalog %s at version %d: %d names", self._uri, version, len(newest))
