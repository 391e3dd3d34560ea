"""Idempotent-producer state of one topic: which sequence numbers each producer has written.

A producer's sequence numbers run per topic (HTTP), or per partition for a producer whose requests carry
a ``scope`` (Kafka producers number each partition on its own); each (producer, scope) has its own state.
The durable state (epoch and last sequence) is committed in the same Delta commit as the records, as a
``txn`` action per producer and scope, so a restarted broker knows which retries are duplicates. The
results of a producer's last few requests are kept in memory so that a retry is answered with the
original offsets; after a restart they are looked up in the table.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from topiclake.errors import InvalidProducerEpoch, InvalidRecord, OutOfOrderSequence
from topiclake.platform.records import ProducerInfo

logger = logging.getLogger(__name__)

#: How many recent requests per producer are remembered for duplicate answers (Kafka keeps 5 batches).
RECENT_REQUESTS = 5
MAX_SEQUENCE = 2**31 - 1
MAX_EPOCH = 2**15 - 1


def producer_app_id(topic: str, producer_id: int, scope: int | None = None) -> str:
    """The Delta ``txn`` app id under which a producer's state on a topic (or one partition) is committed."""
    base = f"topiclake/producer/{topic}/{producer_id}"
    return base if scope is None else f"{base}/p{scope}"


def encode_state(epoch: int, last_sequence: int) -> int:
    """Pack epoch and last sequence into one ``txn`` version."""
    return (epoch << 32) | last_sequence


def decode_state(version: int) -> tuple[int, int]:
    """Unpack a ``txn`` version into (epoch, last sequence)."""
    return version >> 32, version & 0xFFFFFFFF


@dataclass
class _Entry:
    epoch: int
    last_sequence: int  # -1: nothing written in this epoch
    recent: deque[tuple[int, int, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_REQUESTS))


@dataclass(frozen=True)
class Duplicate:
    """A request that was written before: ``original`` is what the first attempt was answered with
    (an in-flight handle or a list of results), or None when it must be looked up in the table."""

    producer_id: int
    base_sequence: int
    count: int
    original: Any
    scope: int | None = None


class ProducerStates:
    """Sequence bookkeeping for the producers of one topic. Callers hold the topic's lock.

    Args:
        load: Returns the durable ``(epoch, last_sequence)`` of a producer in a scope (None: the topic,
            else a partition), or None if it never wrote there.
    """

    def __init__(self, load: Callable[[int, int | None], tuple[int, int] | None]) -> None:
        self._load = load
        self._entries: dict[tuple[int, int | None], _Entry] = {}

    def _entry(self, producer_id: int, scope: int | None) -> _Entry | None:
        entry = self._entries.get((producer_id, scope))
        if entry is None:
            durable = self._load(producer_id, scope)
            if durable is not None:
                entry = _Entry(epoch=durable[0], last_sequence=durable[1])
                self._entries[(producer_id, scope)] = entry
        return entry

    def check(self, info: ProducerInfo, count: int) -> Duplicate | None:
        """Validate a request's sequence range; return a :class:`Duplicate` if it was written before.

        Raises:
            InvalidProducerEpoch: The epoch is older than the newest seen (the producer was fenced).
            OutOfOrderSequence: The sequence skips ahead or starts a new producer/epoch above 0.
        """
        if info.producer_id < 0 or not 0 <= info.epoch <= MAX_EPOCH:
            raise InvalidRecord(
                "producer_id must be >= 0 and epoch within 0..32767",
                producer_id=info.producer_id,
                epoch=info.epoch,
            )
        if info.base_sequence < 0 or info.base_sequence + count - 1 > MAX_SEQUENCE:
            raise InvalidRecord("sequence out of range 0..2^31-1", sequence=info.base_sequence)
        entry = self._entry(info.producer_id, info.scope)
        if entry is None or info.epoch > entry.epoch:
            if info.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"a new producer or epoch must start at sequence 0, not {info.base_sequence}",
                    producer_id=info.producer_id,
                    epoch=info.epoch,
                    expected_sequence=0,
                    sequence=info.base_sequence,
                )
            return None
        if info.epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer epoch {info.epoch} is older than {entry.epoch}: this producer was fenced",
                producer_id=info.producer_id,
                epoch=info.epoch,
                current_epoch=entry.epoch,
            )
        last = info.base_sequence + count - 1
        if info.base_sequence == entry.last_sequence + 1:
            return None
        if last <= entry.last_sequence:
            for base, n, original in entry.recent:
                if base == info.base_sequence and n == count:
                    return Duplicate(info.producer_id, base, n, original, info.scope)
            return Duplicate(info.producer_id, info.base_sequence, count, None, info.scope)
        raise OutOfOrderSequence(
            f"expected sequence {entry.last_sequence + 1}, got {info.base_sequence}",
            producer_id=info.producer_id,
            epoch=info.epoch,
            expected_sequence=entry.last_sequence + 1,
            sequence=info.base_sequence,
        )

    def record(self, info: ProducerInfo, count: int, handle: Any) -> int:
        """Remember an accepted request; return the ``txn`` version to commit with it."""
        entry = self._entries.get((info.producer_id, info.scope))
        if entry is None or info.epoch > entry.epoch:
            entry = _Entry(epoch=info.epoch, last_sequence=-1)
            self._entries[(info.producer_id, info.scope)] = entry
        entry.last_sequence = info.base_sequence + count - 1
        entry.recent.append((info.base_sequence, count, handle))
        return encode_state(entry.epoch, entry.last_sequence)

    def active(self, scope: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of the producers this broker has seen numbering ``scope``."""
        return sorted((pid, e.epoch, e.last_sequence) for (pid, s), e in self._entries.items() if s == scope)

    def forget(self, partitions: set[int]) -> None:
        """Drop the in-memory state of producers numbering these partitions, and of topic-scoped producers.

        Used when partitions are taken over from another leader: their state moved on there. The state of
        the partitions this broker kept leading stays, including requests queued but not yet committed (a
        snapshot of the table does not know them, so reloading would refuse the producer's next sequence).
        """
        for key in [k for k in self._entries if k[1] is None or k[1] in partitions]:
            del self._entries[key]

    def forget_all(self) -> None:
        """Drop the in-memory state; it is reloaded from the table on next use."""
        self._entries.clear()
