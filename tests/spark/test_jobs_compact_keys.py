"""The key compaction job: within the cleanable range (sealed segments older than min.compaction.lag.ms,
up to the first younger one), the latest record per key stays, with its offset; tombstones go after
delete.retention.ms; null keys, the active segment and everything after the range are untouched."""

from __future__ import annotations

from _jobs_support import BASE_TS, check_core_after_job, hwm, make_topic, segments, table_rows
from pyspark.sql import SparkSession

from topiclake.jobs import compact_keys
from topiclake.platform import Record

HOUR = 3_600_000
NOW = BASE_TS + 10 * HOUR
CONFIGS: dict[str, str | int] = {
    "cleanup.policy": "compact",
    "segment.ms": "1",  # every request rolls a new segment
    "min.compaction.lag.ms": "60000",
    "delete.retention.ms": str(HOUR),
}


def _r(key: str | None, value: str | None, ts: int) -> Record:
    return Record(key=key.encode() if key else None, value=value.encode() if value else None, timestamp_ms=ts)


# One request per segment. S2 is younger than min.compaction.lag.ms, so the cleanable range is S0-S1.
SEGMENTS = [
    [
        _r("a", "a0", BASE_TS),
        _r("b", "b0", BASE_TS),
        _r("t", "t0", BASE_TS),
        _r("u", "u0", BASE_TS),
        _r(None, "n0", BASE_TS),
    ],
    [
        _r("a", "a1", BASE_TS + 1000),
        _r("t", None, BASE_TS + 1000),
        _r("u", None, NOW - 600_000),
        _r("c", "c1", BASE_TS + 1000),
    ],
    [_r("c", "c2", NOW - 30_000), _r("d", "d2", NOW - 30_000)],
    [_r("a", "a3", BASE_TS + 3000), _r("d", "d3", BASE_TS + 3000)],
    [_r("b", "b4", BASE_TS + 4000)],  # the active segment
]


def _values(uri: str) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {o: (k, v) for (_, o), (k, v, _) in table_rows(uri).items()}


def test_key_compaction_keeps_the_latest_per_key_in_the_cleanable_range(
    spark: SparkSession, warehouse: str
) -> None:
    topic = make_topic(warehouse, "users", partitions=1, configs=CONFIGS, batches=[(0, s) for s in SEGMENTS])
    make_topic(warehouse, "plain", partitions=1, batches=[(0, SEGMENTS[0])])
    bases = [0, 5, 9, 11, 13]
    assert segments(topic.uri, 0) == bases
    before = _values(topic.uri)

    first = compact_keys.run(
        spark,
        compact_keys.CompactKeysConfig(warehouse=warehouse, topics=("users", "plain"), now_ms=NOW),
    )
    users, plain = first.topics
    assert plain.skipped == "cleanup.policy=delete"
    # a0 (a1 is newer), t0 and t's tombstone (older than delete.retention.ms), u0 (its tombstone is newer)
    dropped = {0, 2, 3, 6}
    assert users.records_removed == 4 and users.commits == 1
    assert users.details["segments_rewritten"] == 2
    after = _values(topic.uri)
    assert after == {o: kv for o, kv in before.items() if o not in dropped}
    # b0 stays although b4 (active segment) is newer; c1 although c2 (too young) is; the null key stays
    assert after[1] == (b"b", b"b0") and after[8] == (b"c", b"c1") and after[4] == (None, b"n0")
    assert after[7] == (b"u", None)  # a tombstone within delete.retention.ms stays
    assert segments(topic.uri, 0) == bases
    assert hwm(topic.uri, "users", 0) == 14
    assert users.log_start_offsets == {0: 0}  # as in Kafka, cleaning does not move the log start

    # two hours later S2 is old enough: the range reaches S3; u's tombstone has expired
    second = compact_keys.run(
        spark,
        compact_keys.CompactKeysConfig(warehouse=warehouse, topics=("users",), now_ms=NOW + 2 * HOUR),
    )
    [users] = second.topics
    dropped |= {5, 7, 8, 10}  # a1 (a3 is newer), u's tombstone, c1 (c2 is newer), d2 (d3)
    assert users.records_removed == 4
    final = _values(topic.uri)
    assert final == {o: kv for o, kv in before.items() if o not in dropped}
    assert sorted(final) == [1, 4, 9, 11, 12, 13]
    assert "records removed 4" in second.summary()

    check_core_after_job(topic, {(0, o) for o in dropped})
