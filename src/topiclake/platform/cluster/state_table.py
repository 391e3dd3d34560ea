"""The cluster's state in the warehouse: the controller's epoch and every partition's leadership.

A Delta table ``_system/partition_state`` that SQL can read. Each controller write replaces the whole
table (one small file: a few bytes per partition) and carries the Delta ``txn`` action
``topiclake/controller`` whose version is the controller epoch. That action is the fence: two brokers
claiming the controllership on one snapshot, or a deposed controller writing after its successor, carry
the same app id and one of the commits fails. Older versions stay readable (time travel shows every
leadership change).

Rows: one ``kind = 'controller'`` row (``leader`` = the controller's broker id, ``leader_epoch`` = its epoch,
``isr`` = the brokers it sees alive) and one ``kind = 'partition'`` row per partition.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from topiclake.errors import StorageError
from topiclake.platform.catalog.system_table import FOREIGN_ERRORS, SmallSystemTable
from topiclake.platform.cluster.metadata import PartitionState
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

STATE_TABLE = "partition_state"
CONTROLLER_APP_ID = "topiclake/controller"

STATE_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("leader", pa.int32(), nullable=False),
        pa.field("leader_epoch", pa.int64(), nullable=False),
        pa.field("replicas", pa.list_(pa.int32())),
        pa.field("isr", pa.list_(pa.int32())),
        pa.field("controller_epoch", pa.int64(), nullable=False),
        pa.field("updated_ms", pa.int64(), nullable=False),
    ]
)

_PROPERTIES = {"delta.checkpointInterval": "10", "delta.logRetentionDuration": "interval 7 days"}


@dataclass(frozen=True)
class ClusterState:
    """One version of the state table."""

    version: int
    controller_id: int  # -1: no controller yet
    controller_epoch: int
    live: tuple[int, ...]  # the brokers the controller saw alive
    partitions: dict[str, tuple[PartitionState, ...]] = field(default_factory=dict)


EMPTY = ClusterState(-1, -1, 0, ())


class StateTable(SmallSystemTable):
    """Reads and (as controller) writes ``_system/partition_state``."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage, STATE_TABLE, _PROPERTIES)

    def read(self) -> ClusterState:
        """The newest state (refreshes first)."""
        version = self.version()
        dt = self._table()
        if dt is None or version < 0:
            return EMPTY
        rows = self.rows()
        epoch = dt.transaction_version(CONTROLLER_APP_ID) or 0
        controller, live = -1, ()
        parts: dict[str, list[PartitionState]] = {}
        for r in rows:
            if r["kind"] == "controller":
                controller, live = int(r["leader"]), tuple(r["isr"] or ())
                continue
            parts.setdefault(r["topic"], []).append(
                PartitionState(
                    r["topic"],
                    int(r["partition"]),
                    int(r["leader"]),
                    int(r["leader_epoch"]),
                    tuple(r["replicas"] or ()),
                    tuple(r["isr"] or ()),
                )
            )
        partitions = {t: tuple(sorted(ps, key=lambda s: s.partition)) for t, ps in parts.items()}
        return ClusterState(version, controller, epoch, live, partitions)

    def write(
        self,
        controller_id: int,
        epoch: int,
        live: tuple[int, ...],
        partitions: dict[str, tuple[PartitionState, ...]],
        base_version: int,
    ) -> int:
        """Replace the state, fenced by the controller epoch; return the new version.

        ``base_version`` is the version the caller decided on: the write fails (CommitConflict-like
        StorageError) when another controller wrote since, so a deposed controller cannot overwrite its
        successor.
        """
        now = int(time.time() * 1000)
        rows: list[dict[str, object]] = [
            {
                "kind": "controller",
                "topic": None,
                "partition": None,
                "leader": controller_id,
                "leader_epoch": epoch,
                "replicas": list(live),
                "isr": list(live),
                "controller_epoch": epoch,
                "updated_ms": now,
            }
        ]
        for states in partitions.values():
            for s in states:
                rows.append(
                    {
                        "kind": "partition",
                        "topic": s.topic,
                        "partition": s.partition,
                        "leader": s.leader,
                        "leader_epoch": s.leader_epoch,
                        "replicas": list(s.replicas),
                        "isr": list(s.isr),
                        "controller_epoch": epoch,
                        "updated_ms": now,
                    }
                )
        data = pa.Table.from_pylist(rows, schema=STATE_SCHEMA)
        props = CommitProperties(
            app_transactions=[Transaction(CONTROLLER_APP_ID, epoch, now)],
            custom_metadata={"topiclake.controller": str(controller_id)},
        )
        try:
            dt = self._table()
            if dt is None:
                self.create(data, props)
                return 0
            dt.update_incremental()
            if dt.version() != base_version:
                raise StorageError(
                    f"cluster state moved from version {base_version} to {dt.version()} under controller "
                    f"{controller_id}",
                )
            write_deltalake(dt, data, mode="overwrite", commit_properties=props)
            return dt.version()
        except FOREIGN_ERRORS as exc:
            self.forget()  # reopen next time: the snapshot may be behind
            raise StorageError(
                f"controller {controller_id} (epoch {epoch}) lost a state write: {exc}"
            ) from exc
