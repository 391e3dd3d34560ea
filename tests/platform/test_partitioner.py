"""Kafka's default partitioner: murmur2 vectors from Kafka's own tests, key stability, keyless spread."""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pytest

from topiclake.errors import InvalidPartitions
from topiclake.platform.partitioner import Partitioner, murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (apache/kafka, clients/src/test/java/...).
KAFKA_MURMUR2_CASES = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_CASES)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_covers_every_tail_length_and_stays_signed_32_bit() -> None:
    # Lengths 0..3 mod 4 take different tail paths; results must fit Java's int.
    for length in range(0, 40):
        h = murmur2(bytes(range(length)))
        assert -(2**31) <= h < 2**31
    # Empty input is hashed like Java: seed ^ 0 mixed by the final avalanche only.
    assert murmur2(b"") == murmur2(bytearray())
    assert murmur2(b"\xff\xfe\xfd\xfc\xfb") != murmur2(b"\xff\xfe\xfd\xfc")


def test_murmur2_accepts_bytes_like() -> None:
    for data, expected in KAFKA_MURMUR2_CASES:
        assert murmur2(memoryview(data)) == expected
        assert murmur2(bytearray(data)) == expected


def test_to_positive_clears_sign_bit_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF


def test_partition_for_key_is_kafkas_formula() -> None:
    for data, expected in KAFKA_MURMUR2_CASES:
        for n in (1, 2, 3, 7, 12, 100):
            assert partition_for_key(data, n) == (expected & 0x7FFFFFFF) % n
    # "21" hashes negative: abs() would give another partition than Kafka's sign-bit clear.
    assert partition_for_key(b"21", 10) == 1173551340 % 10 == 0
    assert abs(-973932308) % 10 == 8


def test_same_key_same_partition_across_calls_and_instances() -> None:
    keys = [f"user-{i % 50}".encode() for i in range(1000)]
    first = Partitioner(seed=0).assign(keys, 16)
    second = Partitioner(seed=12345).assign(keys, 16)
    assert first == second
    by_key: dict[bytes, set[int]] = {}
    for key, part in zip(keys, first, strict=True):
        by_key.setdefault(key, set()).add(part)
    assert all(len(parts) == 1 for parts in by_key.values())
    assert all(first[i] == partition_for_key(keys[i], 16) for i in range(len(keys)))


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 10])
def test_keyless_spread_is_even_across_calls(partitions: int) -> None:
    p = Partitioner()
    counts: Counter[int] = Counter()
    rounds = 50
    # Batches of varying sizes, mixed with keyed records that must not disturb the rotation.
    total = 0
    sizes = [1, 3, 2, 5, 1, 4]
    i = 0
    while total < rounds * partitions:
        size = min(sizes[i % len(sizes)], rounds * partitions - total)
        i += 1
        keys: list[bytes | None] = [None] * size + [b"k"]
        parts = p.assign(keys, partitions)
        counts.update(parts[:size])
        total += size
    assert sum(counts.values()) == rounds * partitions
    assert set(counts) == set(range(partitions))
    assert max(counts.values()) - min(counts.values()) <= 1


def test_keyless_round_robin_is_consecutive_from_seed() -> None:
    p = Partitioner(seed=5)
    assert p.assign([None, None, None, None], 4) == [1, 2, 3, 0]
    assert p.next_partition(4) == 1
    assert p.assign([None, b"abc", None], 4) == [2, partition_for_key(b"abc", 4), 3]


def test_keyless_spread_is_even_under_threads() -> None:
    p = Partitioner()
    partitions = 6
    results: list[list[int]] = []
    lock = threading.Lock()

    def worker() -> None:
        local: list[int] = []
        for _ in range(100):
            local.extend(p.assign([None, None, None], partitions))
        with lock:
            results.append(local)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(part for local in results for part in local)
    assert sum(counts.values()) == 4 * 100 * 3
    assert max(counts.values()) - min(counts.values()) <= 1


def test_assign_arrow_matches_assign() -> None:
    keys: list[bytes | None] = [b"a", None, b"foobar", None, b"21"]
    arr = Partitioner(seed=0).assign_arrow(pa.array(keys, pa.binary()), 5)
    assert arr.type == pa.int32()
    assert arr.to_pylist() == Partitioner(seed=0).assign(keys, 5)
    strings = Partitioner(seed=0).assign_arrow(pa.array(["a", None, "foobar", None, "21"], pa.string()), 5)
    assert strings.to_pylist() == arr.to_pylist()
    nulls = Partitioner(seed=3).assign_arrow(pa.array([None, None, None], pa.binary()), 2)
    assert nulls.to_pylist() == [1, 0, 1]


@pytest.mark.parametrize("bad", [0, -1, -100])
def test_bad_partition_count_raises(bad: int) -> None:
    p = Partitioner()
    with pytest.raises(InvalidPartitions):
        p.assign([b"a"], bad)
    with pytest.raises(InvalidPartitions):
        p.assign([None], bad)
    with pytest.raises(InvalidPartitions):
        partition_for_key(b"a", bad)
    with pytest.raises(InvalidPartitions):
        p.next_partition(bad)


def test_empty_batch() -> None:
    assert Partitioner().assign([], 3) == []
