"""Kafka's default partitioner: where a record goes when the producer does not name a partition.

A keyed record goes to ``toPositive(murmur2(key)) % partitions``, byte-for-byte what the Java client's
``BuiltInPartitioner.partitionForKey`` does (``org.apache.kafka.common.utils.Utils.murmur2``), so a key lands
on the partition a Kafka producer would have chosen. A record without a key is spread round-robin, one record
at a time, from a counter that starts at a random offset and is shared by all callers.

An explicit partition always wins over the partitioner; that choice is the caller's.
"""

from __future__ import annotations

import logging
import random
import struct
import threading
from collections.abc import Sequence
from typing import cast

import pyarrow as pa

from topiclake.errors import InvalidPartitions

logger = logging.getLogger(__name__)

__all__ = ["Partitioner", "murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_CACHE_KEYS = 100_000


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Return Kafka's 32-bit murmur2 hash of ``data`` as Java returns it (a signed 32-bit int).

    This is ``org.apache.kafka.common.utils.Utils.murmur2``: seed ``0x9747b28c``, ``m = 0x5bd1e995``,
    ``r = 24``, little-endian 4-byte blocks, the tail mixed in from its last byte down.

    Args:
        data: The bytes to hash (any bytes-like object).

    Returns:
        The hash in ``[-2**31, 2**31)``.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    blocks = length >> 2
    if blocks:
        for k in struct.unpack_from(f"<{blocks}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> _R
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Return Kafka's ``Utils.toPositive``: the number with its sign bit cleared (not its absolute value)."""
    return number & 0x7FFFFFFF


def _check_partitions(num_partitions: int) -> None:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
        raise InvalidPartitions(
            f"the number of partitions must be an integer >= 1, got {num_partitions!r}",
            partitions=num_partitions,
        )


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Return the partition Kafka's default partitioner picks for a keyed record.

    Args:
        key: The record's serialized key.
        num_partitions: The topic's partition count.

    Returns:
        ``to_positive(murmur2(key)) % num_partitions``.

    Raises:
        InvalidPartitions: ``num_partitions`` is below 1.
    """
    _check_partitions(num_partitions)
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner:
    """Assigns partitions to records: by key hash when keyed, round-robin when not.

    One instance is shared by every request of a broker; it is thread-safe. The round-robin counter is
    shared across topics and calls, so keyless records from many small requests still spread evenly.

    Args:
        seed: Start value of the round-robin counter; random when omitted (tests pass one).
    """

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._counter = random.randrange(0x7FFFFFFF) if seed is None else seed
        self._hashes: dict[bytes, int] = {}

    def _reserve(self, count: int) -> int:
        """Reserve ``count`` consecutive round-robin slots and return the first."""
        with self._lock:
            start = self._counter
            self._counter = start + count
        return start

    def next_partition(self, num_partitions: int) -> int:
        """Return the round-robin partition for one keyless record.

        Raises:
            InvalidPartitions: ``num_partitions`` is below 1.
        """
        _check_partitions(num_partitions)
        return self._reserve(1) % num_partitions

    def assign(self, keys: Sequence[bytes | None], num_partitions: int) -> list[int]:
        """Return the partition of each record of a batch, in order.

        Args:
            keys: Each record's serialized key, or None for a record without a key.
            num_partitions: The topic's partition count.

        Returns:
            One partition per key: ``to_positive(murmur2(key)) % num_partitions`` for a key, the next
            round-robin slot for None.

        Raises:
            InvalidPartitions: ``num_partitions`` is below 1.
        """
        _check_partitions(num_partitions)
        n = num_partitions
        keys_list = keys if isinstance(keys, list) else list(keys)
        keyless = keys_list.count(None)
        rr = self._reserve(keyless) if keyless else 0
        if n == 1:
            return [0] * len(keys_list)
        # Keys repeat, within a batch and across requests (customer ids, device ids): a bounded cache of
        # positive hashes saves the pure-Python murmur2 (~1-2 us a key) for all but the first sighting.
        cache = self._hashes
        if len(cache) > _CACHE_KEYS:
            cache.clear()
        if not keyless:
            hashes = list(map(cache.get, keys_list))  # a C loop: every key seen before is the common case
            if None not in hashes:
                return [h % n for h in cast("list[int]", hashes)]
        out: list[int] = []
        append = out.append
        for key in keys_list:
            if key is None:
                append(rr % n)
                rr += 1
                continue
            h = cache.get(key)
            if h is None:
                h = murmur2(key) & 0x7FFFFFFF
                cache[key] = h
            append(h % n)
        return out

    def assign_arrow(self, keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> pa.Int32Array:
        """Like :meth:`assign` for an Arrow binary (or string) column of keys; nulls are keyless.

        Args:
            keys: The keys of a batch as a binary, large binary or string array.
            num_partitions: The topic's partition count.

        Returns:
            An ``int32`` array of partitions, one per key.

        Raises:
            InvalidPartitions: ``num_partitions`` is below 1.
        """
        _check_partitions(num_partitions)
        if keys.null_count == len(keys):
            start = self._reserve(len(keys))
            return pa.array([(start + i) % num_partitions for i in range(len(keys))], type=pa.int32())
        if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
            keys = keys.cast(pa.binary())
        parts = self.assign(keys.to_pylist(), num_partitions)
        return pa.array(parts, type=pa.int32())
