"""The offsets store's rows (:class:`CommittedOffset`, queued commits, their records) and the state of an
:class:`~.offsets_store.OffsetsStore` that its parts share. Split from
:mod:`.offsets_store`, which re-exports the public names.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from topiclake.errors import RequestTimedOut
from topiclake.platform.storage import Storage

#: App id of the ``txn`` action that fences writers of the offsets table.
OFFSETS_APP_ID: Final = "topiclake/consumer_offsets"

_FOREIGN = (DeltaError, OSError, pa.ArrowException)

_VACUUM_EVERY_S: Final = 600.0

TopicPartition = tuple[str, int]

_Key = tuple[str, str, int]


@dataclass(frozen=True)
class CommittedOffset:
    """The committed offset of one partition for one group.

    Attributes:
        topic: Topic.
        partition: Partition.
        offset: The next offset the group reads (Kafka's meaning).
        metadata: The string committed with it.
        commit_timestamp_ms: When it was committed (epoch ms).
        member_id: The member that committed it (None for simple commits and resets).
        generation: That member's generation (-1 for simple commits and resets).
    """

    topic: str
    partition: int
    offset: int
    metadata: str
    commit_timestamp_ms: int
    member_id: str | None
    generation: int


@dataclass(eq=False)
class _Pending:
    group: str
    rows: list[CommittedOffset]
    future: Future[None]


def _record(group: str, row: CommittedOffset, seq: int) -> dict[str, Any]:
    return {
        "group": group,
        "topic": row.topic,
        "partition": row.partition,
        "committed_offset": row.offset,
        "metadata": row.metadata,
        "commit_timestamp": row.commit_timestamp_ms * 1000,
        "member_id": row.member_id,
        "generation": row.generation,
        "commit_seq": seq,
    }


def wait(future: Future[None], timeout_s: float, group: str) -> None:
    """Wait for a submitted commit; translate a timeout."""
    try:
        future.result(timeout=timeout_s)
    except TimeoutError as exc:
        raise RequestTimedOut(
            f"offset commit of group {group} not confirmed within {timeout_s:.1f} s; it may still land",
            group=group,
        ) from exc


class OffsetsBase:
    """The attributes every part uses (set by ``OffsetsStore.__init__``) and, for the type
    checker, the methods one part calls on another."""

    uri: str
    commits: int
    compactions: int
    _storage: Storage
    _linger_s: float
    _compact_after: int
    _attempts: int
    _lock: threading.Lock
    _cond: threading.Condition
    _write_lock: threading.Lock
    _queue: list[_Pending]
    _latest: dict[_Key, CommittedOffset]
    _seq: int
    _table_rows: int
    _closing: bool
    _last_vacuum: float
    _dt: DeltaTable
    _flusher: threading.Thread
