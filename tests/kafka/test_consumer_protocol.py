"""Kafka's consumer group protocol (KIP-848, ``group.protocol=consumer``) with real clients: three members
join and leave one after the other while a producer writes. Every record is consumed, no partition is
ever owned by two members at once (each member's assign/revoke callbacks, in time order), the offsets the
members committed are the ends of the partitions, and a new member resumes from them."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from gateway_harness import start_gateway, stop_gateway
from kafka_harness import KafkaGateway

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow

PARTITIONS = 6
RECORDS = 600
PACE_S = 0.01  # ~100 records/s: the producer writes for the whole join/leave sequence
STEP_S = 1.5  # between two joins or leaves


@pytest.fixture(scope="module")
def kafka848(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaGateway]:
    """One gateway for this module; members heartbeat every 500 ms (Kafka's default is 5 s)."""
    port = free_port()
    wh = tmp_path_factory.mktemp("kip848") / "wh"
    gw, server, thread = start_gateway(wh, kafka_port=port, consumer_group_heartbeat_interval_ms=500)
    try:
        yield KafkaGateway(gw, f"127.0.0.1:{port}", port)
    finally:
        stop_gateway(gw, server, thread)


@dataclass
class Ledger:
    """What the members saw: records, and who owned which partition (checked as events arrive)."""

    consumed: set[tuple[int, int]] = field(default_factory=set)
    owner: dict[int, str] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    assigned_to: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def assign(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            for p in partitions:
                if self.owner.get(p, member) != member:
                    self.overlaps.append(f"{p} given to {member} while {self.owner[p]} owns it")
                self.owner[p] = member
            if partitions:
                self.assigned_to.add(member)

    def revoke(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            for p in partitions:
                if self.owner.get(p) == member:
                    del self.owner[p]

    def record(self, partition: int, offset: int) -> None:
        with self.lock:
            self.consumed.add((partition, offset))


def _produce(bootstrap: str, topic: str, count: int) -> threading.Thread:
    from confluent_kafka import Producer

    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        for i in range(count):
            p.produce(topic, f"v{i}".encode(), key=str(i).encode())
            p.poll(0)
            time.sleep(PACE_S)
        assert p.flush(30) == 0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _ends(kafka: KafkaGateway, topic: str) -> dict[int, int]:
    log = kafka.gw.broker.log(topic)
    return {p: log.high_watermark(p) for p in range(PARTITIONS)}


def _committed(kafka: KafkaGateway, group: str, topic: str) -> dict[int, int]:
    return {p: c.offset for (t, p), c in kafka.gw.broker.groups.committed(group).items() if t == topic}


def _churn(
    start: Callable[[str], Callable[[], None]], done: Callable[[], bool], joined: Callable[[str], bool]
) -> None:
    """Members m1, m2, m3 join one after the other, each STEP_S after the previous one was first assigned
    partitions (a JVM on a loaded machine takes seconds to get there); m1 then m2 leave; m3 stays until
    ``done()``."""
    stops = {}
    for name in ("m1", "m2", "m3"):
        stops[name] = start(name)
        deadline = time.monotonic() + 60
        while not joined(name):
            assert time.monotonic() < deadline, f"{name} was never assigned a partition"
            time.sleep(0.1)
        time.sleep(STEP_S)
    for name in ("m1", "m2"):
        stops[name]()
        time.sleep(STEP_S)
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, "the last member did not consume every record"
        time.sleep(0.1)
    stops["m3"]()


class ConfluentMember:
    """A confluent-kafka consumer with ``group.protocol=consumer`` polling in its own thread."""

    def __init__(self, kafka: KafkaGateway, group: str, topic: str, name: str, ledger: Ledger) -> None:
        from confluent_kafka import Consumer

        self.name, self.ledger = name, ledger
        conf = {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        self.consumer = Consumer(conf)
        self.stop = threading.Event()
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _c, ps: ledger.assign(name, [p.partition for p in ps]),
            on_revoke=self._revoked,
        )
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def _revoked(self, _c: object, ps: list[Any]) -> None:
        self.ledger.revoke(self.name, [p.partition for p in ps])  # what it read is committed already

    def run(self) -> None:
        while not self.stop.is_set():
            batch = self.consumer.consume(100, 0.1)
            for m in batch:
                if m.error() is None:
                    self.ledger.record(m.partition(), m.offset())
            if batch:
                self.consumer.commit(asynchronous=False)
        self.consumer.close()  # leaves the group (epoch -1) after revoking

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_confluent_members_join_and_leave_while_a_producer_writes(kafka848: KafkaGateway) -> None:
    kafka848.gw.broker.create_topic("kip848c", partitions=PARTITIONS)
    ledger = Ledger()
    producer = _produce(kafka848.bootstrap, "kip848c", RECORDS)

    def start(name: str) -> Callable[[], None]:
        return ConfluentMember(kafka848, "g848c", "kip848c", name, ledger).close

    _churn(
        start,
        lambda: not producer.is_alive() and len(ledger.consumed) >= RECORDS,
        lambda name: name in ledger.assigned_to,
    )
    producer.join(30)
    assert not ledger.overlaps, ledger.overlaps
    assert ledger.assigned_to == {"m1", "m2", "m3"}  # every member got partitions at some point
    ends = _ends(kafka848, "kip848c")
    assert sum(ends.values()) == RECORDS
    assert ledger.consumed == {(p, o) for p, end in ends.items() for o in range(end)}
    assert _committed(kafka848, "g848c", "kip848c") == ends

    # a new member resumes from the committed offsets: it reads only what was produced since
    _produce(kafka848.bootstrap, "kip848c", 12).join(30)
    later = Ledger()
    member = ConfluentMember(kafka848, "g848c", "kip848c", "m4", later)
    deadline = time.monotonic() + 30
    while len(later.consumed) < 12 and time.monotonic() < deadline:
        time.sleep(0.1)
    member.close()
    assert later.consumed and all(o >= ends[p] for p, o in later.consumed), later.consumed
    assert len(later.consumed) == 12


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)")
def test_java_verifiable_consumers_join_and_leave_while_a_producer_writes(kafka848: KafkaGateway) -> None:
    """Kafka 4.2's VerifiableConsumer --group-protocol consumer (commitSync after every poll), three
    processes; its JSON events say what each was assigned, revoked and consumed. Then kafka-consumer-groups
    --describe shows the group's committed offsets."""
    from kafka_jars import JAVA, classpath

    kafka848.gw.broker.create_topic("kip848j", partitions=PARTITIONS)
    ledger = Ledger()
    events: list[tuple[int, str, dict[str, object]]] = []
    joined: set[str] = set()  # members whose events said they were assigned partitions
    cp = classpath()

    def start(name: str) -> Callable[[], None]:
        cmd = [*JAVA, "-cp", cp, "org.apache.kafka.tools.VerifiableConsumer", "--verbose"]
        cmd += ["--bootstrap-server", kafka848.bootstrap, "--topic", "kip848j", "--group-id", "g848j"]
        cmd += ["--group-protocol", "consumer", "--group-remote-assignor", "range"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    ev = json.loads(line)
                    events.append((int(ev["timestamp"]), name, ev))
                    if ev["name"] == "record_data":
                        ledger.record(int(ev["partition"]), int(ev["offset"]))
                    elif ev["name"] == "partitions_assigned" and ev.get("partitions"):
                        joined.add(name)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def stop() -> None:
            proc.send_signal(signal.SIGTERM)  # its shutdown hook closes the consumer: leaves the group
            try:
                proc.wait(30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            reader.join(10)

        return stop

    producer = _produce(kafka848.bootstrap, "kip848j", RECORDS)
    _churn(start, lambda: not producer.is_alive() and len(ledger.consumed) >= RECORDS, joined.__contains__)
    producer.join(30)
    for _ts, name, ev in sorted(events, key=lambda e: (e[0], e[2]["name"] != "partitions_revoked")):
        parts = [int(p["partition"]) for p in ev.get("partitions", [])]  # type: ignore[attr-defined]
        if ev["name"] == "partitions_assigned":
            ledger.assign(name, parts)
        elif ev["name"] == "partitions_revoked":
            ledger.revoke(name, parts)
    assert not ledger.overlaps, ledger.overlaps
    assert ledger.assigned_to == {"m1", "m2", "m3"}
    ends = _ends(kafka848, "kip848j")
    assert ledger.consumed == {(p, o) for p, end in ends.items() for o in range(end)}
    assert _committed(kafka848, "g848j", "kip848j") == ends
    assert all(ev.get("success", True) for _t, _n, ev in events if ev["name"] == "offsets_committed")

    cmd = [*JAVA, "-cp", cp, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"]
    cmd += ["--bootstrap-server", kafka848.bootstrap, "--describe", "--group", "g848j"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("g848j ")]
    assert {int(r[2]): int(r[3]) for r in rows} == ends, out.stdout


def test_describe_shows_a_live_consumer_group(kafka848: KafkaGateway) -> None:
    """ConsumerGroupDescribe through confluent-kafka's AdminClient (and the group type in ListGroups):
    the member, its epoch and assignment; the server-side assignor."""
    from confluent_kafka.admin import AdminClient

    kafka848.gw.broker.create_topic("kip848d", partitions=2)
    ledger = Ledger()
    member = ConfluentMember(kafka848, "g848d", "kip848d", "d1", ledger)
    try:
        deadline = time.monotonic() + 30
        while "d1" not in ledger.assigned_to:
            assert time.monotonic() < deadline, "never assigned"
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": kafka848.bootstrap})
        desc = admin.describe_consumer_groups(["g848d"])["g848d"].result(30)
        assert desc.partition_assignor == "uniform" and str(desc.state).endswith("STABLE")
        (m,) = desc.members
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1]
    finally:
        member.close()


def test_rest_and_console_views_show_the_consumer_group(kafka848: KafkaGateway) -> None:
    """The native REST API, REST v3 and the console list and describe a live consumer-protocol group with
    its type, member, epoch and partitions."""
    kafka848.gw.broker.create_topic("kip848v", partitions=2)
    ledger = Ledger()
    member = ConfluentMember(kafka848, "g848v", "kip848v", "v1", ledger)
    try:
        deadline = time.monotonic() + 30
        while "v1" not in ledger.assigned_to:
            assert time.monotonic() < deadline, "never assigned"
            time.sleep(0.1)
        c = kafka848.gw.client
        listed = {g["group_id"]: g for g in c.get("/v1/groups").json()["groups"]}
        assert listed["g848v"]["type"] == "consumer" and listed["g848v"]["members"] == 1
        d = c.get("/v1/groups/g848v").json()
        assert d["type"] == "consumer" and d["assignor"] == "uniform" and d["state"] == "Stable"
        (m,) = d["members"]
        assert m["assignment"] == [{"topic": "kip848v", "partition": p} for p in (0, 1)]
        assert m["generation_id"] == d["generation_id"] > 0 and m["subscription"] == ["kip848v"]
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        v3 = c.get(f"/v3/clusters/{cid}/consumer-groups/g848v").json()
        assert v3["type"] == "CONSUMER" and v3["state"] == "STABLE" and v3["partition_assignor"] == "uniform"
        page = c.get("/ui/groups").text
        assert "g848v" in page and ">consumer<" in page
    finally:
        member.close()
