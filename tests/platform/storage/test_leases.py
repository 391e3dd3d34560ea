"""Log leases hold a topic's Delta log whole while a reader runs; an expired lease holds nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa

from topiclake.platform import Broker, BrokerConfig, LogLease, Storage
from topiclake.platform.storage.leases import active_leases

FAST = {
    "linger_ms": 0,
    "maintenance_interval_ms": 20,
    "checkpoint_interval": 5,
    "log_retention_ms": 0,
    "compact_min_files": 1000,  # no compaction here: only the log matters
}


def _log_entries(storage: Storage, topic: str) -> int:
    return len(list(Path(storage.topic_uri(topic), "_delta_log").glob("*.json")))


def _produce(broker: Broker, n: int) -> None:
    for i in range(n):
        broker.produce_arrow("t", 0, pa.table({"value": pa.array([str(i).encode()], pa.binary())}))


def _wait_for(predicate, timeout_s: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_lease_keeps_every_log_entry_until_released(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(**FAST)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t")
        with LogLease(storage, "t", holder="test", ttl_s=5) as lease:
            assert [x["holder"] for x in active_leases(storage, "t")] == ["test"]
            _produce(broker, 60)
            assert _wait_for(lambda: broker.log("t").maintainer.stats.cleanups_held > 0)
            assert _log_entries(storage, "t") >= 60  # nothing deleted while held
            path = lease.path
        assert active_leases(storage, "t") == []
        assert not Path(storage.root, path).exists()
        _produce(broker, 20)
        assert _wait_for(lambda: _log_entries(storage, "t") < 30), _log_entries(storage, "t")


def test_an_expired_lease_holds_nothing(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    leases = Path(storage.root, "_system", "leases", "t")
    leases.mkdir(parents=True)
    (leases / "crashed.json").write_text(json.dumps({"holder": "gone", "expires": time.time() - 1}))
    garbage = leases / "garbage.json"
    garbage.write_text("{not json")  # a holder that crashed mid-write, a minute ago
    os.utime(garbage, (time.time() - 61, time.time() - 61))
    assert active_leases(storage, "t") == []
    with Broker(storage, BrokerConfig(**FAST)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t")
        _produce(broker, 60)
        assert _wait_for(lambda: _log_entries(storage, "t") < 30), _log_entries(storage, "t")
        assert broker.log("t").maintainer.stats.cleanups_held == 0


def test_a_lease_is_renewed_while_held(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with LogLease(storage, "t", holder="slow-job", ttl_s=0.6):
        time.sleep(1.5)  # longer than the ttl: only renewal keeps it alive
        assert [x["holder"] for x in active_leases(storage, "t")] == ["slow-job"]
    assert active_leases(storage, "t") == []


def test_a_rewrite_lease_holds_the_brokers_compaction_but_not_a_log_lease(tmp_path: Path) -> None:
    """A Spark job rewriting a topic takes a ``rewrite`` lease: the broker's own compaction, which would win
    every race against the job's slower commit, waits until it is released; a plain log lease (a reader)
    does not stop compaction."""
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(**{**FAST, "compact_min_files": 4, "log_retention_ms": 60_000})  # type: ignore[arg-type]
    with Broker(storage, config) as broker:
        broker.create_topic("t")
        stats = broker.log("t").maintainer.stats
        with LogLease(storage, "t", holder="reader", ttl_s=5):
            _produce(broker, 8)
            assert _wait_for(lambda: stats.compactions > 0)
        with LogLease(storage, "t", holder="compaction-job", ttl_s=5, kind="rewrite"):
            before = stats.compactions
            _produce(broker, 12)
            assert _wait_for(lambda: stats.compactions_held > 0)
            time.sleep(0.3)  # the last commits' rounds
            builds, held = stats.index_builds, stats.compactions_held
            time.sleep(0.3)  # several more rounds on a table that does not change
            assert stats.compactions_held > held
            assert stats.index_builds == builds  # the held version is remembered, not re-indexed
            assert stats.compactions == before
        assert _wait_for(lambda: stats.compactions > before)


def test_a_renewal_never_lets_a_reader_see_the_log_unheld(tmp_path: Path) -> None:
    """Renewing rewrites the lease file: a reader looking at that instant must still see it held (a local
    file is renewed by a rename, never truncated in place). Seen: a Spark job's conflict check lost a log
    entry that maintenance cleaned while the job's lease was being renewed."""
    storage = Storage(str(tmp_path / "wh"))
    lease = LogLease(storage, "t", holder="job", ttl_s=0.03).acquire()  # renewed every 10 ms
    try:
        unheld = sum(1 for _ in range(2000) if not active_leases(storage, "t"))
    finally:
        lease.release()
    assert unheld == 0
    assert sorted(p.name for p in Path(storage.root, "_system", "leases", "t").iterdir()) == []


def test_an_unreadable_lease_file_holds_until_it_is_stale(tmp_path: Path) -> None:
    """A lease file caught mid-write (or left half-written by a crashed holder) holds the log while it is
    fresh, of any kind asked for, and stops holding once it is older than an unrenewed lease could be."""
    from topiclake.platform.storage.leases import UNREADABLE_TTL_S

    storage = Storage(str(tmp_path / "wh"))
    folder = Path(storage.root, "_system", "leases", "t")
    folder.mkdir(parents=True)
    torn = folder / "torn.json"
    torn.write_text('{"holder": "job", "exp')
    assert [x["holder"] for x in active_leases(storage, "t")] == ["unreadable"]
    assert active_leases(storage, "t", kind="rewrite")  # holds the brokers' compaction too
    old = time.time() - UNREADABLE_TTL_S - 1
    os.utime(torn, (old, old))
    assert active_leases(storage, "t") == []
    assert json.loads(json.dumps(active_leases(storage, "t", now=old))) != []
