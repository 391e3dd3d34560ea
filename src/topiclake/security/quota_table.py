"""Client quota overrides in the warehouse: the Delta table ``_system/quotas``, one row per (user, key).

Kafka keeps client quotas in its metadata (``kafka-configs --entity-type users``, AlterClientQuotas); here
they are a small Delta table like ``_system/acls``: every change rewrites it in one commit carrying the
Delta ``txn`` action ``topiclake/quotas`` (two brokers changing quotas on the same snapshot: one commit
fails, re-reads and retries), with ``topiclake.quotas.change`` in the commit info. SQL reads it, Delta
history is the audit trail.

Entities are Kafka's *user* entities: a user name (the principal ``User:<name>``) or the default user
(``entity_name`` null, Kafka's ``<default>``). Keys are Kafka's names where Kafka has one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from topiclake.errors import CommitConflict, InvalidConfig, StorageError
from topiclake.platform.catalog.system_table import FOREIGN_ERRORS, SmallSystemTable
from topiclake.platform.storage import Storage
from topiclake.security.quotas import QuotaKind

logger = logging.getLogger(__name__)

QUOTA_TABLE = "quotas"
QUOTA_APP_ID = "topiclake/quotas"
USER = "user"

#: Kafka's quota keys (and topiclake's request rate, which Kafka has no key for) -> what they limit.
KEYS: dict[str, QuotaKind] = {
    "producer_byte_rate": QuotaKind.PRODUCE,
    "consumer_byte_rate": QuotaKind.FETCH,
    "request_rate": QuotaKind.REQUEST,
}

QUOTA_SCHEMA = pa.schema(
    [
        pa.field("entity_type", pa.string(), nullable=False),
        pa.field("entity_name", pa.string(), nullable=True),  # null: the default user
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("updated_ms", pa.int64(), nullable=False),
    ]
)

_PROPERTIES = {"delta.checkpointInterval": "10", "delta.logRetentionDuration": "interval 30 days"}
_RETRIES = 10

#: user (None: the default user) -> key -> value
QuotaMap = dict[str | None, dict[str, float]]


@dataclass(frozen=True)
class QuotaChange:
    """Set (``value``) or remove (``value`` None) one quota of one user (None: the default user)."""

    user: str | None
    key: str
    value: float | None

    def check(self) -> None:
        """Raise :class:`~topiclake.errors.InvalidConfig` for an unknown key or a negative value."""
        if self.key not in KEYS:
            raise InvalidConfig(f"unknown quota {self.key!r}; known: {', '.join(KEYS)}", key=self.key)
        if self.value is not None and not self.value >= 0:
            raise InvalidConfig(f"quota {self.key} must be >= 0 (0 = unlimited)", key=self.key)
        if self.user == "":
            raise InvalidConfig("a user entity needs a name (or the default user)")


def principal_of(user: str | None) -> str | None:
    """The principal a user entity names (``User:<name>``; None for the default user)."""
    return None if user is None else f"User:{user}"


class QuotaTable(SmallSystemTable):
    """Reads and writes ``_system/quotas``."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage, QUOTA_TABLE, _PROPERTIES)

    def read(self) -> tuple[int, QuotaMap]:
        """The newest version and its quotas."""
        version = self.version()
        out: QuotaMap = {}
        if version < 0:
            return -1, out
        for r in self.rows():
            if r["entity_type"] == USER:
                out.setdefault(r["entity_name"], {})[str(r["key"])] = float(r["value"])
        return version, out

    def alter(self, changes: list[QuotaChange], what: str) -> int:
        """Apply ``changes`` in one commit, retrying on a concurrent change; the version written (or the
        unchanged one when nothing changes).

        Raises:
            InvalidConfig: A change names an unknown key or a negative value (nothing is written).
            CommitConflict: Other brokers kept changing the quotas for every retry.
            StorageError: The warehouse could not be read or written.
        """
        for c in changes:
            c.check()

        def edit(current: QuotaMap) -> QuotaMap | None:
            new = {user: dict(values) for user, values in current.items()}
            for c in changes:
                values = new.setdefault(c.user, {})
                if c.value is None:
                    values.pop(c.key, None)
                else:
                    values[c.key] = float(c.value)
                if not values:
                    del new[c.user]
            return None if new == current else new

        return self._change(edit, what)

    def _change(self, edit: Callable[[QuotaMap], QuotaMap | None], what: str) -> int:
        for _ in range(_RETRIES):
            version, current = self.read()
            new = edit(current)
            if new is None:
                return version
            now = int(time.time() * 1000)
            data = pa.Table.from_pylist(_rows(new, now), schema=QUOTA_SCHEMA)
            props = CommitProperties(
                app_transactions=[Transaction(QUOTA_APP_ID, version + 1, now)],
                custom_metadata={"topiclake.quotas.change": what},
            )
            try:
                dt = self._table()
                if dt is None:
                    self.create(data, props)
                else:
                    write_deltalake(dt, data, mode="overwrite", commit_properties=props)
                self.forget()
                logger.info("quotas changed (%s) at version %d", what, version + 1)
                return version + 1
            except (*FOREIGN_ERRORS, StorageError) as exc:
                logger.info("quota change %s lost a race at version %d (%s); retrying", what, version, exc)
                self.forget()
                time.sleep(0.02)
        raise CommitConflict(f"could not change the quotas ({what}): other brokers kept changing them")


def _rows(quotas: Mapping[str | None, Mapping[str, float]], now: int) -> list[dict[str, object]]:
    return [
        {"entity_type": USER, "entity_name": user, "key": key, "value": value, "updated_ms": now}
        for user, values in sorted(quotas.items(), key=lambda kv: (kv[0] is not None, kv[0] or ""))
        for key, value in sorted(values.items())
    ]
