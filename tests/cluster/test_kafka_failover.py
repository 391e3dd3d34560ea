"""Kafka clients bootstrapped from ONE broker of three produce to leaders on all of them, and keep producing
when the broker they bootstrapped from (a partition leader) is killed -9: every acknowledged record is in
the topic's Delta table exactly once, offsets contiguous, nothing written twice (idempotence across the
leader move). Measured numbers are logged (``-s`` or the log capture) and recorded in docs/kafka-protocol.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from broker_harness import wait_for
from kafka_cluster import (
    FAST_ENV,
    KafkaBroker,
    find_coordinator,
    kafka_sees,
    leaders,
    start_kafka_brokers,
    table_rows,
)

pytestmark = pytest.mark.slow

logger = logging.getLogger(__name__)

PARTITIONS = 6
BEFORE_KILL_S = 1.5  # producing before the kill
AFTER_KILL_S = 6.0  # producing after the kill (the session timeout is 2.5 s)
MAX_RECORDS = 4000
PACE_S = 0.004  # ~250 records/s offered


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[KafkaBroker]]:
    """Three brokers with Kafka listeners over one warehouse, shared by this module's tests (starting
    three is the slow part here); stopped by pid at the end."""
    logs = tmp_path_factory.mktemp("kafka-failover")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in FAST_ENV.items():
            mp.setenv(k, v)
        brokers = start_kafka_brokers(logs / "wh", logs, 3)
        try:
            yield brokers
        finally:
            for b in brokers:
                b.proc.stop()


@pytest.fixture
def cluster(three_brokers: list[KafkaBroker]) -> list[KafkaBroker]:
    """The three brokers, each alive: one a previous test killed is started again (same ports)."""
    dead = [b for b in three_brokers if not b.proc.alive]
    if dead:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in FAST_ENV.items():
                mp.setenv(k, v)
            for b in dead:
                b.proc.start()

        def all_listed() -> bool:
            doc = httpx.get(f"{three_brokers[0].proc.url}/v1/metadata", timeout=5).json()
            return len(doc["brokers"]) == len(three_brokers)

        wait_for(all_listed, 30, "every broker in the metadata again")
        wait_for(lambda: kafka_sees(three_brokers[0], 3), 30, "every broker in the Kafka metadata again")
    return three_brokers


@dataclass
class Outcome:
    """What a producer was told: value -> (partition, offset) for acks, values that failed."""

    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    acked_at: dict[bytes, float] = field(default_factory=dict)
    failed: dict[bytes, str] = field(default_factory=dict)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, value: bytes, partition: int, offset: int) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)
            self.acked_at[value] = time.monotonic()

    def fail(self, value: bytes, why: str) -> None:
        with self.lock:
            self.failed[value] = why


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])
    futures[topic].result(30)


def metadata_leaders(bootstrap: str, topic: str) -> tuple[set[int], dict[int, int]]:
    """Broker ids and partition leaders as a Kafka client sees them through ``bootstrap`` alone."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return set(md.brokers), {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


def drive(
    send: Callable[[int, bytes], None],
    poll: Callable[[], None],
    victim: KafkaBroker,
    outcome: Outcome,
) -> float:
    """Send records round-robin over the partitions for a while, kill -9 ``victim`` mid-stream, keep
    sending; return the monotonic time of the kill."""
    killed_at = 0.0
    started = time.monotonic()
    i = 0
    while i < MAX_RECORDS:
        now = time.monotonic()
        if not killed_at and now - started > BEFORE_KILL_S:
            assert outcome.acked, "nothing was acknowledged before the kill"
            victim.proc.kill9()
            killed_at = time.monotonic()
            logger.info("killed broker %d after %d acks", victim.broker_id, len(outcome.acked))
        if killed_at and now - killed_at > AFTER_KILL_S:
            break
        send(i % PARTITIONS, f"v{i:06d}".encode())
        outcome.sent += 1
        poll()
        i += 1
        time.sleep(PACE_S)
    return killed_at


def kafka_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark as a Kafka consumer sees it through ``bootstrap``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def check(
    name: str,
    warehouse: Path,
    topic: str,
    outcome: Outcome,
    moved: set[int],
    killed_at: float,
    live: KafkaBroker,
) -> None:
    """Every ack is a row exactly once at its offset; no value twice; offsets contiguous; report."""
    rows = table_rows(warehouse, topic)
    where: dict[bytes, list[tuple[int, int]]] = {}
    per_part: dict[int, list[int]] = {}
    for p, o, v in rows:
        where.setdefault(v, []).append((p, o))
        per_part.setdefault(p, []).append(o)
    dups = {v: w for v, w in where.items() if len(w) > 1}
    lost = [v for v in outcome.acked if v not in where]
    wrong = [v for v, po in outcome.acked.items() if v in where and where[v] != [po]]
    after = [t for v, t in outcome.acked_at.items() if outcome.acked[v][0] in moved and t > killed_at]
    failover = (min(after) - killed_at) if after else float("nan")
    logger.info(
        "%s: sent %d acked %d failed %d in table %d lost %d duplicated %d; first ack on a moved partition "
        "%.1f s after the kill",
        name,
        outcome.sent,
        len(outcome.acked),
        len(outcome.failed),
        len(rows),
        len(lost),
        len(dups),
        failover,
    )
    print(
        f"\n{name}: sent={outcome.sent} acked={len(outcome.acked)} failed={len(outcome.failed)} "
        f"rows={len(rows)} lost={len(lost)} duplicated={len(dups)} failover_s={failover:.1f}"
    )
    assert not dups, f"written twice: {list(dups.items())[:5]}"
    assert not lost, f"acknowledged but not in the table: {lost[:5]}"
    assert not wrong, f"acknowledged at another offset: {wrong[:5]}"
    for p, offsets in per_part.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
    assert len(outcome.acked) + len(outcome.failed) == outcome.sent, "some sends were never answered"
    assert after, "nothing was acknowledged on the killed broker's partitions after the kill"
    assert len(where) <= outcome.sent
    # a Kafka client reading through a live broker sees the table's ends
    assert kafka_ends(live.bootstrap, topic) == {p: len(per_part.get(p, [])) for p in range(PARTITIONS)}


def prepare(cluster: list[KafkaBroker], topic: str) -> tuple[KafkaBroker, set[int]]:
    """Create the topic through broker 1 alone; check that a client bootstrapped from it sees every broker
    and leaders on at least two; return broker 1 (the victim) and the partitions it leads."""
    entry = cluster[0]
    create_topic(entry.bootstrap, topic)
    seen: dict[int, int] = {}

    def led_by_all() -> bool:
        nonlocal seen
        ids, seen = metadata_leaders(entry.bootstrap, topic)
        ok = ids == {1, 2, 3} and len(seen) == PARTITIONS and len(set(seen.values())) >= 2
        return ok and seen == leaders(entry, topic)  # the Kafka listener says what the cluster says

    deadline = time.monotonic() + 30
    while not led_by_all():
        assert time.monotonic() < deadline, f"leaders seen by the client: {seen}"
        time.sleep(0.2)
    moved = {p for p, b in seen.items() if b == entry.broker_id}
    assert moved, f"broker {entry.broker_id} leads nothing: {seen}"
    return entry, moved


# ------------------------------------------------------------- the replication factor over CreateTopics
# First in the module, on the settled cluster: right after a killed broker returns, the controller has
# been seen to place a new RF-2 topic on one broker only (docs/cluster.md, "Replica placement and racks").


def _replicas(bootstrap: str, topic: str) -> list[list[int]]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return [list(p.replicas) for _i, p in sorted(md.topics[topic].partitions.items())]


def test_confluent_admin_gets_the_replication_factor_it_asks_for(cluster: list[KafkaBroker]) -> None:
    """confluent-kafka's AdminClient: factor 1 and 2 on three brokers give 1 and 2 distinct replicas per
    partition; 4 is refused with INVALID_REPLICATION_FACTOR and creates nothing."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    for rf in (1, 2):
        admin.create_topics([NewTopic(f"rf{rf}", num_partitions=3, replication_factor=rf)])[f"rf{rf}"].result(
            30
        )
        deadline = time.monotonic() + 15  # a lagging controller view grows the replicas at its next tick
        while True:
            replicas = _replicas(cluster[0].bootstrap, f"rf{rf}")
            if all(len(set(r)) == len(r) == rf for r in replicas) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(replicas) == 3 and all(len(set(r)) == len(r) == rf for r in replicas), replicas
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("rf4", num_partitions=1, replication_factor=4)])["rf4"].result(30)
    assert err.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "rf4" not in admin.list_topics(timeout=30).topics


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)")
def test_java_admin_gets_the_replication_factor_it_asks_for(cluster: list[KafkaBroker]) -> None:
    """Kafka's own kafka-topics (TopicCommand, Java admin client 4.2.0): --replication-factor 1 and 2,
    described back by the same tool; 4 refused."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))
    from kafka_jars import JAVA, classpath

    def topics(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [*JAVA, "-cp", classpath(), "org.apache.kafka.tools.TopicCommand"]
        cmd += ["--bootstrap-server", cluster[1].bootstrap, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    for rf in (1, 2):
        out = topics("--create", "--topic", f"jrf{rf}", "--partitions", "3", "--replication-factor", str(rf))
        assert out.returncode == 0, out.stderr
        out = topics("--describe", "--topic", f"jrf{rf}")
        assert out.returncode == 0, out.stderr
        assert f"ReplicationFactor: {rf}" in out.stdout, out.stdout
        lines = [line for line in out.stdout.splitlines() if "Partition: " in line]
        replicas = [line.split("Replicas: ")[1].split()[0].split(",") for line in lines]
        assert len(replicas) == 3 and all(len(set(r)) == len(r) == rf for r in replicas), out.stdout
    out = topics("--create", "--topic", "jrf4", "--partitions", "1", "--replication-factor", "4")
    assert out.returncode != 0 and "larger than the number of live brokers (3)" in out.stdout, out.stdout
    assert "jrf4" not in topics("--list").stdout.split()


def test_confluent_kafka_producer_survives_the_kill_of_its_bootstrap_broker(
    cluster: list[KafkaBroker],
) -> None:
    from confluent_kafka import KafkaError, Message, Producer

    topic = "ck"
    victim, moved = prepare(cluster, topic)
    outcome = Outcome()
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": victim.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
            "linger.ms": 5,
            "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
            "error_cb": lambda err: errors.append(str(err)),
        }
    )

    def delivered(err: KafkaError | None, msg: Message) -> None:
        value = bytes(msg.value() or b"")
        if err is None:
            outcome.ack(value, int(msg.partition() or 0), int(msg.offset() or 0))
        else:
            outcome.fail(value, str(err))

    def send(partition: int, value: bytes) -> None:
        producer.produce(topic, value=value, partition=partition, on_delivery=delivered)

    try:
        killed_at = drive(send, lambda: producer.poll(0), victim, outcome)
    finally:
        print("client errors:", errors[-10:])
    assert producer.flush(70) == 0, "sends left unanswered"
    check("confluent-kafka", cluster[0].proc.warehouse, topic, outcome, moved, killed_at, cluster[1])
    # a client bootstrapped from a live broker sees the moved leaders, none on the dead broker
    ids, now = metadata_leaders(cluster[1].bootstrap, topic)
    assert ids == {2, 3} and set(now.values()) <= {2, 3}


def test_kafka_python_producer_survives_the_kill_of_its_bootstrap_broker(
    cluster: list[KafkaBroker],
) -> None:
    from kafka import KafkaProducer

    topic = "kp"
    victim, moved = prepare(cluster, topic)
    outcome = Outcome()
    producer = KafkaProducer(
        bootstrap_servers=victim.bootstrap,
        acks="all",
        enable_idempotence=True,
        retries=2**31 - 1,
        delivery_timeout_ms=60000,
        request_timeout_ms=10000,
        linger_ms=5,
        retry_backoff_ms=100,
        reconnect_backoff_max_ms=500,
    )
    try:

        def send(partition: int, value: bytes) -> None:
            fut = producer.send(topic, value=value, partition=partition)
            fut.add_callback(lambda md, v=value: outcome.ack(v, md.partition, md.offset))
            fut.add_errback(lambda exc, v=value: outcome.fail(v, repr(exc)))

        killed_at = drive(send, lambda: None, victim, outcome)
        try:
            producer.flush(70)
        except Exception:  # the client's own view, so that a hang says where it is (seen once in CI)
            raise AssertionError(kafka_python_stuck(producer, cluster[1], topic)) from None
    finally:
        producer.close(0)  # an unanswered send fails the check below (or the flush above) anyway
    check("kafka-python", cluster[0].proc.warehouse, topic, outcome, moved, killed_at, cluster[1])


def kafka_python_stuck(producer: Any, live: KafkaBroker, topic: str) -> str:
    """What a kafka-python producer whose flush timed out is waiting for: its batches not yet answered,
    its producer-id state, the leaders it knows against those the cluster names, and its sender thread's
    stack. Logged and returned as the failure's message."""
    from kafka.structs import TopicPartition

    now = time.monotonic()
    batches = [
        f"p{b.topic_partition.partition} aged {now - b.created:.1f}s tries {b.attempts} retry {b.in_retry()}"
        for b in producer._accumulator._incomplete.all()
    ]
    tm = producer._transaction_manager
    state = f"{tm._current_state} {tm.producer_id_and_epoch} last error {tm.last_error!r}" if tm else "-"
    known = {p: producer._metadata.leader_for_partition(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    _ids, cluster_leaders = metadata_leaders(live.bootstrap, topic)
    frame = sys._current_frames().get(producer._sender.ident)
    stack = "".join(traceback.format_stack(frame)[-12:]) if frame is not None else "(no sender thread)"
    text = (
        f"kafka-python's flush timed out: {len(batches)} batches unanswered {batches[:12]}; producer id "
        f"state {state}; leaders it knows {known}, the cluster's {cluster_leaders}; sender thread:\n{stack}"
    )
    logger.error("%s", text)
    return text


class Member:
    """A confluent-kafka group member on its own thread: consumes, commits synchronously after each
    batch, and remembers what it consumed and whether that batch's commit succeeded."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, protocol: str = "classic") -> None:
        self.name = name
        self.config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 500,
        }
        if protocol == "classic":
            self.config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        else:  # KIP-848: the broker sets both (FAST_ENV: 500 ms, 6 s)
            self.config["group.protocol"] = "consumer"
        self.topic = topic
        self.consumed: list[tuple[int, int, bytes, float]] = []  # partition, offset, value, when
        self.uncommitted: set[bytes] = set()  # values whose batch's commit failed
        self.commit_errors: list[str] = []
        self.errors: list[str] = []
        self.assignment: list[int] = []
        self.positions: dict[int, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                got = consumer.consume(100, 0.3)
                assigned = consumer.assignment()
                self.assignment = sorted(tp.partition for tp in assigned)
                self.positions = {tp.partition: tp.offset for tp in consumer.position(assigned)}
                with self.lock:
                    self.errors.extend(str(m.error()) for m in got if m.error() is not None)
                msgs = [m for m in got if m.error() is None]
                if not msgs:
                    continue
                now = time.monotonic()
                with self.lock:
                    for m in msgs:
                        value = bytes(m.value() or b"")
                        self.consumed.append((int(m.partition() or 0), int(m.offset() or 0), value, now))
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    with self.lock:
                        self.commit_errors.append(str(exc))
                        self.uncommitted.update(bytes(m.value() or b"") for m in msgs)
        finally:
            consumer.close()

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _p, _o, v, _t in self.consumed]


def states(members: list[Member]) -> list[str]:
    """What each member consumed and the errors it saw, for failure messages."""
    out = []
    for m in members:
        with m.lock:
            parts = sorted({p for p, _o, _v, _t in m.consumed})
            errors = [*m.errors[-3:], *m.commit_errors[-3:]]
            where = f"assigned {m.assignment} at {m.positions}"
            out.append(f"{m.name}: {len(m.consumed)} from {parts} {where}, errors {errors}")
    return out


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Idempotent acks=all produce of ``values`` round-robin over the partitions; all must be acked."""
    from confluent_kafka import KafkaError, Message, Producer

    failed: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_group_resumes_after_its_coordinator_is_killed(
    cluster: list[KafkaBroker], protocol: str
) -> None:
    """Two confluent-kafka members bootstrapped from broker 1; the group's coordinator (broker 2, which
    also leads partitions) is killed -9: FindCoordinator names a live broker, committed offsets are kept,
    consumption resumes after the last commit, and records produced after the kill are consumed. Both
    group protocols: classic, and KIP-848's (members fenced by the new coordinator rejoin with epoch 0)."""
    from topiclake.platform.cluster.assignment import coordinator_for

    topic = "cg" if protocol == "classic" else "cg848"
    entry = cluster[0]
    victim = cluster[1]
    prefix = protocol[:2]
    group = next(
        f"{prefix}{i}" for i in range(1000) if coordinator_for(f"{prefix}{i}", [1, 2, 3]) == victim.broker_id
    )
    create_topic(entry.bootstrap, topic)
    first = [f"a{i:05d}".encode() for i in range(600)]
    second = [f"b{i:05d}".encode() for i in range(600)]
    produce_all(entry.bootstrap, topic, first)
    # every acknowledged record is in the table (the first batches of a new topic go through broker 1,
    # which forwards those of partitions it does not lead: each partition's own sequence numbers kept)
    assert sorted(v for _p, _o, v in table_rows(Path(entry.proc.warehouse), topic)) == first
    assert victim.broker_id in set(leaders(entry, topic).values())

    members = [Member(f"m{i}", entry.bootstrap, group, topic, protocol) for i in (1, 2)]
    for m in members:
        m.thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(set(members[0].values()) | set(members[1].values())) < len(first):
            # once seen in ~3 of 12 runs: acknowledged records of some partitions never written
            # (docs/kafka-protocol.md, "Found: the consumption stall ...")
            assert time.monotonic() < deadline, f"not consumed: {states(members)} {leaders(entry, topic)}"
            time.sleep(0.1)
        assert find_coordinator(entry, group) == victim.broker_id
        time.sleep(1.0)  # the last batch's commit
        before = {m.name: len(m.consumed) for m in members}
        victim.proc.kill9()
        killed_at = time.monotonic()
        produce_all(entry.bootstrap, topic, second)
        produced_in = time.monotonic() - killed_at
        while len(set(members[0].values()) | set(members[1].values())) < len(first) + len(second):
            assert time.monotonic() < deadline + 60, f"the second half was not consumed: {states(members)}"
            time.sleep(0.1)
        resumed = min(t for m in members for _p, _o, v, t in m.consumed if v.startswith(b"b")) - killed_at
        time.sleep(1.0)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(30)
    new_coordinator = find_coordinator(entry, group)
    assert new_coordinator in (1, 3) and new_coordinator == coordinator_for(group, [1, 3])

    after = [c for m in members for c in m.consumed[before[m.name] :]]
    again = [v for _p, _o, v, _t in after if v.startswith(b"a")]
    uncommitted = set().union(*(m.uncommitted for m in members))
    # resumed after the last commit: what was consumed and committed before the kill is not read again
    assert set(again) <= uncommitted, f"committed, consumed again: {sorted(set(again) - uncommitted)[:5]}"
    everything = [v for m in members for v in m.values()]
    assert set(everything) == set(first) | set(second)
    dup = len(everything) - len(set(everything))

    from confluent_kafka import Consumer, TopicPartition

    check = Consumer({"bootstrap.servers": entry.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        ends = [check.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(6)]
    finally:
        check.close()
    assert [tp.offset for tp in committed] == ends and sum(ends) == len(first) + len(second)
    errors = [e for m in members for e in m.commit_errors]
    print(
        f"\nconsumer group ({protocol}): consumed {len(everything)} ({dup} again), "
        f"commit errors {len(errors)}, coordinator {victim.broker_id} -> {new_coordinator}, "
        f"second half produced in {produced_in:.1f} s, "
        f"first record after the kill consumed {resumed:.1f} s after it"
    )


def client_classpath(version: str) -> str:
    """kafka-clients of ``version`` and its runtime jars, from the jars tests/kafka resolve (4.2.0 with
    Kafka's tools; 3.9.2, the one Spark 4.2's connector uses, with spark-sql-kafka)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))
    from kafka_jars import classpath, spark_kafka_jars

    tools = classpath().split(os.pathsep)
    jars = tools if version == "4.2.0" else spark_kafka_jars()
    (clients,) = [j for j in jars if Path(j).name == f"kafka-clients-{version}.jar"]
    needs = ("slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
    runtime = [j for j in tools if Path(j).name.startswith(needs)]
    return os.pathsep.join([clients, *runtime])


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)")
@pytest.mark.parametrize("version", ["4.2.0", "3.9.2"])
def test_java_producer_survives_the_kill_of_its_bootstrap_broker(
    cluster: list[KafkaBroker], version: str
) -> None:
    """Kafka's own Java producer (kafka-clients 4.2.0, and 3.9.2, which never goes back to its bootstrap
    list), acks=all and idempotent, bootstrapped from broker 1, which is killed -9 while it produces."""
    topic = "jv" + version.replace(".", "")
    victim, moved = prepare(cluster, topic)
    outcome = Outcome()
    program = Path(__file__).resolve().parent / "java" / "FailoverProducer.java"
    seconds = "60"  # at most; stopped by a line on its stdin
    args = [victim.bootstrap, topic, str(PARTITIONS), seconds, "4"]
    classpath = client_classpath(version)  # puts tests/kafka on sys.path
    from kafka_jars import JAVA, compiled

    cmd = [*JAVA, "-cp", f"{classpath}:{compiled(program, classpath)}", "FailoverProducer", *args]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            parts = line.split()
            if parts and parts[0] == "ACK":
                outcome.ack(parts[1].encode(), int(parts[2]), int(parts[3]))
            elif parts and parts[0] == "FAIL":
                outcome.fail(parts[1].encode(), line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not outcome.acked:
            assert proc.poll() is None and time.monotonic() < deadline, "the Java producer did not start"
            time.sleep(0.05)
        time.sleep(BEFORE_KILL_S)
        victim.proc.kill9()
        killed_at = time.monotonic()
        time.sleep(AFTER_KILL_S)
        assert proc.stdin is not None
        proc.stdin.write("stop\n")
        proc.stdin.close()
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    assert proc.returncode == 0 and lines and lines[-1] == "DONE", lines[-5:]
    outcome.sent = len(outcome.acked) + len(outcome.failed)
    check(f"java {version}", cluster[0].proc.warehouse, topic, outcome, moved, killed_at, cluster[1])
