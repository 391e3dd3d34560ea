"""What the parts of a topic log share: the table's ``txn`` ids, its per-partition state, and
:class:`LogBase`, the attributes of a :class:`~.topic_log.TopicLog` that its parts
(:mod:`._append`, :mod:`._commit`, :mod:`._reads`) use. Split from :mod:`.topic_log`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, PostCommitHookProperties
from deltalake.exceptions import DeltaError

from topiclake.errors import NotLeader, PartitionNotFound
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicInfo
from topiclake.platform.config import BrokerConfig
from topiclake.platform.log.append_handle import PendingBatch
from topiclake.platform.log.file_cache import SmallFileCache
from topiclake.platform.log.file_index import FileIndex
from topiclake.platform.log.maintenance import TableMaintainer
from topiclake.platform.log.producer_state import ProducerStates
from topiclake.platform.log.tail_cache import TailCache
from topiclake.platform.storage import Storage

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log

FOREIGN_ERRORS = (DeltaError, OSError, pa.ArrowException)

#: Table features a topic table may carry: those delta-rs 1.6 writes correctly. Anything else (deletion
#: vectors, row tracking, type widening, v2 checkpoints, in-commit timestamps, domain metadata, column
#: mapping) would make appends fail, so a table with it is refused on open with a clear error.
WRITABLE_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "timestampNtz"}
)


def commit_landed(dt: DeltaTable, commit_id: str, base_version: int) -> bool:
    """Whether the commit tagged ``topiclake.commit = commit_id`` landed after ``base_version``.

    How a writer whose commit raised tells a lost attempt from one that landed anyway (``dt`` refreshed).
    """
    newer = dt.version() - base_version
    return newer > 0 and any(c.get("topiclake.commit") == commit_id for c in dt.history(newer))


def partition_app_id(topic: str, partition: int) -> str:
    """The Delta ``txn`` app id whose version is the high watermark of a partition."""
    return f"topiclake/hwm/{topic}/{partition}"


def epoch_app_id(topic: str, partition: int) -> str:
    """The Delta ``txn`` app id whose version is the leader epoch of the partition's last leader commit."""
    return f"topiclake/epoch/{topic}/{partition}"


@dataclass(eq=False)
class LedPartition:
    """A partition this broker leads: its offsets, current segment and in-memory tail."""

    partition: int
    next_offset: int
    high_watermark: int
    segment_base: int
    segment_bytes: int
    segment_first_ms: int
    tail: TailCache
    cond: threading.Condition = field(default_factory=threading.Condition)
    #: Called once (on the flusher) when the high watermark next moves, and dropped: long polls waiting on
    #: an event loop (:meth:`LogReads.watch`), woken as the threads waiting on ``cond`` are.
    watchers: list[Callable[[], None]] = field(default_factory=list)

    def advance(self, end: int) -> None:
        """Raise the high watermark to ``end`` (a commit landed) and wake every long poll."""
        with self.cond:
            self.high_watermark = max(self.high_watermark, end)
        self.wake()

    def wake(self) -> None:
        """Wake every long poll of this partition (they look again: new records, a close, a handover)."""
        with self.cond:
            self.cond.notify_all()
            woken, self.watchers = self.watchers, []
        for wake in woken:
            try:
                wake()
            except Exception:  # a watcher's failure must not stop the flusher that called it
                logger.exception("partition %d: a long poll's wake-up failed", self.partition)


class LogBase:
    """The state of a topic log (set by ``TopicLog.__init__``) and the checks every part uses."""

    topic: str
    info: TopicInfo
    uri: str
    commits: int
    fences: int
    commit_latencies_ms: list[float]
    maintainer: TableMaintainer
    _storage: Storage
    _config: BrokerConfig
    _budget: MemoryBudget
    _lock: threading.Lock
    _cond: threading.Condition
    _queue: list[PendingBatch]
    _queued_records: int
    _queued_bytes: int
    _inflight: list[PendingBatch]
    _last_requests: int
    _last_commit_s: float
    _queued_requests: int
    _closing: bool
    _closed: bool
    _index_lock: threading.Lock
    _index: FileIndex | None
    _fs: pafs.FileSystem
    _file_cache: SmallFileCache | None
    _intents_checked: float
    _intents: bool
    _holds: int
    _commit_lock: threading.Lock
    _dt: DeltaTable
    _led: dict[int, int] | None
    _hooks: PostCommitHookProperties | None
    _producers: ProducerStates
    _parts: dict[int, LedPartition]
    _takeover_reader: DeltaTable | None
    _flusher: threading.Thread

    # ------------------------------------------------------------------ leadership (cluster)

    def leads(self, partition: int) -> bool:
        """Whether this broker leads the partition (always, outside a cluster)."""
        led = self._led
        return led is None or partition in led

    def _require_leader(self, partition: int) -> None:
        if not self.leads(partition):
            raise NotLeader(
                f"this broker does not lead {self.topic}-{partition}: retry at its leader (see metadata)",
                topic=self.topic,
                partition=partition,
            )

    # ------------------------------------------------------------------ write

    def _partition(self, partition: int) -> LedPartition:
        part = self._parts.get(partition)
        if part is None:
            raise PartitionNotFound(
                f"topic {self.topic} has no partition {partition} (it has {len(self._parts)})",
                topic=self.topic,
                partition=partition,
            )
        return part

    if TYPE_CHECKING:  # defined by the parts; declared here for the others

        def _refresh_index(self, force: bool = False, min_version: int | None = None) -> FileIndex: ...

        def _materialize(self, take: list[PendingBatch]) -> None: ...

        def known_version(self) -> int: ...

        def _rebase_if_fenced(self, committed: dict[int, int] | None = None) -> bool: ...

        def _check_table(self, dt: DeltaTable) -> None: ...

        def _recover_partition(
            self, p: int, index: FileIndex, dt: DeltaTable | None = None
        ) -> LedPartition: ...
