"""kafka-python against the Kafka listener: admin, idempotent keyed acks=all produce, a group of two members
that split the partitions, commit, restart and resume after the commit; the records are rows of the table."""

from __future__ import annotations

import threading
import time

import pyarrow.compute as pc
import pytest
from gateway_harness import table_rows
from kafka.admin import NewTopic
from kafka_harness import KafkaGateway

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.slow


def _poll_until(
    consumers: list[KafkaConsumer], want: int, timeout_s: float = 45, commit: bool = False
) -> list[list[object]]:
    """Each consumer polls in its own thread (as separate processes would) until ``want`` records came and
    every consumer owns partitions, or the time is up; then, with ``commit``, each commits half of what it
    owns from its own thread, and keeps polling until every member has committed: a rebalance that one
    member's commit meets completes only once the others have polled too (a member that stopped polling
    after its own commit held the others' rejoin until its session timed out)."""
    got: list[list[object]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    done = threading.Event()

    owned: list[set[object]] = [set() for _ in consumers]

    errors: list[BaseException] = []
    finished: list[int] = []  # the members whose commit ended (list.append is atomic)

    def run(i: int, c: KafkaConsumer) -> None:  # a consumer is used by its own thread only
        while not done.is_set() and time.monotonic() < deadline:
            # long polls: a join answered after a poll timed out can stall kafka-python 3.0.12 (below)
            for msgs in c.poll(timeout_ms=1000).values():
                got[i] += msgs
            owned[i] = set(c.assignment())
        if commit:
            try:
                _commit_half(c)
            except BaseException as exc:
                errors.append(exc)
            finally:
                finished.append(i)
            until = time.monotonic() + 30
            while len(finished) < len(consumers) and time.monotonic() < until:
                c.poll(timeout_ms=1000)

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        if sum(len(g) for g in got) >= want and all(owned):
            break
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return got


def test_admin_produce_group_commit_restart_resume(kafka: KafkaGateway) -> None:
    bs = kafka.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([NewTopic("orders", 4, 1)])
        assert "orders" in admin.list_topics()
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bs, acks="all", enable_idempotence=True, linger_ms=5)
    stamp = 1_795_000_000_123
    try:
        for i in range(40):
            producer.send(
                "orders", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)], timestamp_ms=stamp + i
            )
        producer.flush(30)
    finally:
        producer.close(5)
    rows = table_rows(kafka.gw, "orders")
    assert rows.num_rows == 40
    assert sorted(rows["value"].to_pylist()) == sorted(b"v%d" % i for i in range(40))
    first = rows.filter(pc.equal(rows["key"], b"k7")).to_pylist()[0]
    assert first["value"] == b"v7" and first["headers"] == [{"key": "h", "value": b"7"}]
    assert int(first["timestamp"].timestamp() * 1000) == stamp + 7 and first["timestampType"] == 0
    assert first["producer_id"] is not None and first["sequence"] is not None

    # a group of two splits the partitions; nothing is committed until we say so
    opts = {
        "bootstrap_servers": bs,
        "group_id": "g",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
    }
    timing = {"session_timeout_ms": 15000, "heartbeat_interval_ms": 1000}
    members = [_subscribed(**timing, **opts) for _ in range(2)]
    try:
        # commit half of every partition each member owns: offset 5 (or the end, if shorter)
        _poll_until(members, 40, commit=True)
        owned = [sorted(tp.partition for tp in c.assignment()) for c in members]
        assert sorted(owned[0] + owned[1]) == [0, 1, 2, 3] and all(owned), owned
    finally:
        for c in members:
            c.close()
    committed = kafka.gw.broker.groups.committed("g")  # the same offsets table the HTTP groups use
    assert len(committed) == 4

    # restart: a new member resumes exactly after the commit
    resumed = _subscribed(**opts)
    try:
        got = _poll_until([resumed], 40 - sum(c.offset for c in committed.values()))[0]
        seen = {(m.partition, m.offset) for m in got}  # type: ignore[attr-defined]
        for (_topic, p), c in committed.items():
            assert (p, c.offset) in seen or c.offset == resumed.end_offsets([TopicPartition("orders", p)])[
                TopicPartition("orders", p)
            ]
            assert not any(part == p and off < c.offset for part, off in seen)
    finally:
        resumed.close()


def _subscribed(**opts: object) -> KafkaConsumer:
    """A consumer subscribed to ``orders`` once its metadata knows the topic: kafka-python 3.0.12's leader
    otherwise assigns with no partition metadata first, and its rejoin after that can stall the client."""
    c = KafkaConsumer(**opts)
    assert c.partitions_for_topic("orders") == {0, 1, 2, 3}
    c.subscribe(["orders"])
    return c


def _commit_half(c: KafkaConsumer) -> None:
    """Commit offset 5 (or the end) of every partition the member owns; a commit that meets a rebalance
    (kafka-python's leader rejoins when its metadata snapshot changes) is retried after a poll."""
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    deadline = time.monotonic() + 25  # rebalances of three members take longer on a loaded machine
    while time.monotonic() < deadline:
        try:
            c.commit({tp: _meta(min(5, c.end_offsets([tp])[tp])) for tp in c.assignment()})
            return
        except (CommitFailedError, RebalanceInProgressError):
            # rejoin; the other members keep polling in their threads. A poll that times out while the
            # join is in flight can leave kafka-python 3.0.12's leader outside the group for good (seen
            # under load: its SyncGroup answered after a 200-ms poll returned, then every commit failed
            # with "not part of an active group"): give the join time to finish inside the poll.
            c.poll(timeout_ms=2000)
    raise AssertionError("commit kept meeting rebalances for 25 s")


def _meta(offset: int) -> object:
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, "", -1)
