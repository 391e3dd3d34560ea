"""The ACLs in the warehouse: the Delta table ``_system/acls``, one row per binding.

Every change rewrites the (small) table in one commit carrying the Delta ``txn`` action ``topiclake/acls``
with version = the table version it was decided on, plus 1: two brokers changing ACLs on the same snapshot
carry the same app id and one commit fails, then re-reads and retries, so no change is lost. SQL reads the
table like any other; Delta history (with ``topiclake.acls.change`` in the commit info) is the audit trail
and time travel shows the ACLs as they were.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from topiclake.errors import CommitConflict, StorageError
from topiclake.platform.catalog.system_table import FOREIGN_ERRORS, SmallSystemTable
from topiclake.platform.storage import Storage
from topiclake.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

logger = logging.getLogger(__name__)

ACL_TABLE = "acls"
ACL_APP_ID = "topiclake/acls"

ACL_SCHEMA = pa.schema(
    [
        pa.field("principal", pa.string(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("resource_type", pa.string(), nullable=False),
        pa.field("resource_name", pa.string(), nullable=False),
        pa.field("pattern_type", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("permission", pa.string(), nullable=False),
        pa.field("updated_ms", pa.int64(), nullable=False),
    ]
)

_PROPERTIES = {"delta.checkpointInterval": "10", "delta.logRetentionDuration": "interval 30 days"}
_RETRIES = 10


def _row(b: AclBinding, now: int) -> dict[str, object]:
    return {
        "principal": b.principal,
        "host": b.host,
        "resource_type": b.resource_type.value,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.value,
        "operation": b.operation.value,
        "permission": b.permission.value,
        "updated_ms": now,
    }


def _binding(r: dict[str, object]) -> AclBinding:
    return AclBinding(
        str(r["principal"]),
        str(r["host"]),
        ResourceType(str(r["resource_type"])),
        str(r["resource_name"]),
        PatternType(str(r["pattern_type"])),
        Operation(str(r["operation"])),
        Permission(str(r["permission"])),
    )


class AclTable(SmallSystemTable):
    """Reads and writes ``_system/acls``."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage, ACL_TABLE, _PROPERTIES)

    def read(self) -> tuple[int, list[AclBinding]]:
        """The newest version and its bindings (deduplicated, in table order)."""
        version = self.version()
        if version < 0:
            return -1, []
        return version, list(dict.fromkeys(_binding(r) for r in self.rows()))

    def change(
        self, edit: Callable[[list[AclBinding]], list[AclBinding] | None], what: str
    ) -> tuple[int, list[AclBinding]]:
        """Apply ``edit`` to the current bindings and commit the result, retrying on a concurrent change.

        ``edit`` gets the bindings and returns the new list, or None when nothing changes (no commit).
        Returns the committed version (or the unchanged one) and the bindings written.

        Raises:
            CommitConflict: Other brokers kept changing the ACLs for every retry.
            StorageError: The warehouse could not be read or written.
        """
        for _ in range(_RETRIES):
            version, current = self.read()
            new = edit(list(current))
            if new is None:
                return version, current
            now = int(time.time() * 1000)
            data = pa.Table.from_pylist([_row(b, now) for b in new], schema=ACL_SCHEMA)
            props = CommitProperties(
                app_transactions=[Transaction(ACL_APP_ID, version + 1, now)],
                custom_metadata={"topiclake.acls.change": what},
            )
            try:
                dt = self._table()
                if dt is None:
                    self.create(data, props)
                else:
                    write_deltalake(dt, data, mode="overwrite", commit_properties=props)
                self.forget()
                logger.info("acls changed (%s) at version %d", what, version + 1)
                return version + 1, new
            except (*FOREIGN_ERRORS, StorageError) as exc:
                logger.info("acl change %s lost a race at version %d (%s); retrying", what, version, exc)
                self.forget()
                time.sleep(0.02)
        raise CommitConflict(f"could not change the ACLs ({what}): other brokers kept changing them")

    def add(self, bindings: Sequence[AclBinding]) -> None:
        """Add bindings (those already there stay once)."""

        def edit(current: list[AclBinding]) -> list[AclBinding] | None:
            missing = [b for b in dict.fromkeys(bindings) if b not in set(current)]
            return [*current, *missing] if missing else None

        self.change(edit, f"add {len(bindings)}")

    def remove(self, keep: Callable[[AclBinding], bool]) -> list[AclBinding]:
        """Remove every binding ``keep`` returns False for; return the removed ones."""
        removed: list[AclBinding] = []

        def edit(current: list[AclBinding]) -> list[AclBinding] | None:
            removed[:] = [b for b in current if not keep(b)]
            return [b for b in current if keep(b)] if removed else None

        self.change(edit, "remove")
        return removed
