"""Kafka's own Java tools (kafka-tools 4.2.0: the Java client on transaction version 2, KIP-890 part 2, which
the broker finalizes) against one gateway: TransactionalMessageCopier with random aborts and group metadata
copies a topic exactly once, and ProducerPerformance in 100 ms transactions; a read_committed
VerifiableConsumer and the output topic's Delta table (delta-rs) hold each input value exactly once, at
contiguous offsets. The Java client 4.2 on transaction version 2 and with it turned off, and the 3.9
client (the classic protocol), commit, abort and are fenced."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from deltalake import DeltaTable
from gateway_harness import Gateway, start_gateway, stop_gateway, table_rows
from kafka_harness import KafkaGateway
from kafka_jars import JAVA, classpath, compiled, copier_command, stop_copiers, streams_classpath

from topiclake.process.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)"),
]

TOOLS = "org.apache.kafka.tools."


def _tool(cls: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [*JAVA, "-Xmx256m", "-cp", classpath(), TOOLS + cls, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _contiguous(kafka: KafkaGateway, topic: str) -> list[bytes]:
    rows = table_rows(kafka.gw, topic)
    parts = rows["partition"].to_pylist()
    offsets = rows["offset"].to_pylist()
    for p in set(parts):
        mine = [o for q, o in zip(parts, offsets, strict=True) if q == p]
        assert mine == list(range(len(mine))), f"{topic}/{p}: offsets not contiguous"
    return list(rows["value"].to_pylist())


def _seed(kafka: KafkaGateway, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % 2)
    assert p.flush(30) == 0


def _epochs(gw: Gateway, transactional_id: str) -> list[int]:
    """The producer epochs ``_system/transactions`` gave the id, in order (InitProducerId bumps it; with
    transaction version 2 every EndTxn does too)."""
    rows = DeltaTable(gw.storage.system_uri("transactions")).to_pyarrow_table().to_pylist()
    mine = [r for r in rows if r["kind"] == "epoch" and r["transactional_id"] == transactional_id]
    return [r["producer_epoch"] for r in sorted(mine, key=lambda r: (r["at_ms"], r["producer_epoch"]))]


def _copied(kafka: KafkaGateway, partition: int) -> int:
    parts = table_rows(kafka.gw, "sout")["partition"].to_pylist()
    return sum(1 for p in parts if p == partition)


def test_copiers_with_random_aborts_one_killed_and_restarted_copy_exactly_once(
    kafka: KafkaGateway, tmp_path: Path
) -> None:
    """Kafka's transactions system test: 10,000 integers in two partitions, a copier per partition with
    random aborts and group metadata, kill -9 of one mid-run and a restart with the same transactional id;
    a read_committed VerifiableConsumer and the output table read with delta-rs hold each value once."""
    n = 10_000
    kafka.gw.broker.create_topic("sin", partitions=2)
    kafka.gw.broker.create_topic("sout", partitions=2)
    _seed(kafka, "sin", n)
    logs = [open(tmp_path / f"copier-{p}.out", "w") for p in (0, 1)]  # noqa: SIM115 (closed below)
    bs = kafka.bootstrap
    copiers = [
        subprocess.Popen(copier_command(bs, p), stdout=logs[p], stderr=subprocess.STDOUT) for p in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _copied(kafka, 0) < 1000:
            time.sleep(0.2)
        copiers[0].kill()  # SIGKILL: mid-run, likely mid-transaction, no abort sent
        copiers[0].wait(30)
        killed_at = _copied(kafka, 0)
        assert 1000 <= killed_at < n // 2, killed_at
        copiers[0] = subprocess.Popen(copier_command(bs, 0), stdout=logs[0], stderr=subprocess.STDOUT)
        for c in copiers:
            assert c.wait(180) == 0, (tmp_path / "copier-0.out").read_text()[-3000:]
    finally:
        stop_copiers(copiers, logs)
    # the table holds each input exactly once, at contiguous offsets: aborted copies never entered it
    values = _contiguous(kafka, "sout")
    assert sorted(int(v) for v in values) == list(range(n))
    config = tmp_path / "consumer.properties"
    config.write_text("isolation.level=read_committed\n")
    consumer = _tool(
        "VerifiableConsumer",
        "--bootstrap-server", kafka.bootstrap,
        "--topic", "sout",
        "--group-id", "verifier",
        "--max-messages", str(n),
        "--reset-policy", "earliest",
        "--verbose",
        "--consumer.config", str(config),
        timeout=120,
    )  # fmt: skip
    assert consumer.returncode == 0, consumer.stderr[-3000:]
    events = [json.loads(line) for line in consumer.stdout.splitlines() if line.startswith("{")]
    seen = [int(e["value"]) for e in events if e["name"] == "record_data"]
    assert sorted(seen) == list(range(n))
    # transaction version 2: every commit and abort of the copier never killed bumped its epoch (one
    # InitProducerId and ~25 transactions of 200); the classic protocol would have bumped it once
    assert len(_epochs(kafka.gw, "copier-1")) >= 10


def test_producer_performance_in_transactions(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("jperf", partitions=2)
    out = _tool(
        "ProducerPerformance",
        "--topic",
        "jperf",
        "--num-records",
        "3000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={kafka.bootstrap}",
        "--transactional-id",
        "perf-0",
        "--transaction-duration-ms",
        "100",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3000 records sent" in out.stdout, out.stdout[-2000:]
    assert len(_contiguous(kafka, "jperf")) == 3000


def _admin(kafka: KafkaGateway, *args: str) -> str:
    """kafka-transactions.sh (TransactionsCommand) against the gateway: its output, after it succeeded."""
    out = _tool("TransactionsCommand", "--bootstrap-server", kafka.bootstrap, *args, timeout=60)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-3000:])
    return out.stdout


def test_kafka_transactions_tool_lists_describes_and_aborts(kafka: KafkaGateway) -> None:
    kafka.gw.broker.create_topic("tadm", partitions=1)
    plain = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    plain.produce("tadm", value=b"plain", partition=0)
    assert plain.flush(30) == 0
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "adm-0", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("tadm", value=b"open", partition=0)
    assert p.flush(30) == 0  # held by the coordinator: the transaction stays open

    assert any("adm-0" in line and "Ongoing" in line for line in _admin(kafka, "list").splitlines())
    described = _admin(kafka, "describe", "--transactional-id", "adm-0").splitlines()
    head, row = described[0].split(), described[1].split()
    txn = dict(zip(head, row, strict=False))
    assert txn["TransactionState"] == "Ongoing" and "tadm-0" in described[1], described
    pid, epoch = txn["ProducerId"], txn["ProducerEpoch"]
    producers = _admin(kafka, "describe-producers", "--topic", "tadm", "--partition", "0")
    listed = [line.split()[0] for line in producers.splitlines()[1:] if line.strip()]
    assert pid in listed and len(listed) == 2, producers  # the idempotent producer and the open transaction
    hanging = _admin(kafka, "find-hanging", "--broker-id", str(kafka.gw.broker.config.broker_id))
    assert pid not in hanging  # nothing of an open transaction is in a log: nothing can hang
    _admin(
        kafka, "abort", "--topic", "tadm", "--partition", "0",
        "--producer-id", pid, "--producer-epoch", epoch, "--coordinator-epoch", "0",
    )  # fmt: skip
    after = _admin(kafka, "describe", "--transactional-id", "adm-0").splitlines()
    assert "CompleteAbort" in after[1], after
    with pytest.raises(KafkaException):  # the aborted transaction's producer is fenced
        p.commit_transaction(10)
    assert [bytes(v) for v in table_rows(kafka.gw, "tadm")["value"].to_pylist()] == [b"plain"]


STREAMS_APP = Path(__file__).resolve().parent / "java" / "EosWordCount.java"


def _counts(kafka: KafkaGateway, topic: str) -> dict[str, list[int]]:
    """Each key's values in offset order (a key is always in one partition)."""
    rows = table_rows(kafka.gw, topic).to_pylist()
    out: dict[str, list[int]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        out.setdefault(r["key"].decode(), []).append(int(r["value"]))
    return out


def _out_end(kafka: KafkaGateway) -> int:
    log = kafka.gw.broker.log("wc-out")
    return sum(log.high_watermark(p) for p in range(2))


def test_kafka_streams_exactly_once_v2_word_count_across_a_kill(kafka: KafkaGateway, tmp_path: Path) -> None:
    """A Kafka Streams word count (kafka-streams from Maven Central, exactly_once_v2, every update sent)
    killed with -9 mid-run and restarted: each word's committed counts are exactly 1, 2, ..., n."""
    words, n = [f"w{i}" for i in range(10)], 300
    kafka.gw.broker.create_topic("wc-in", partitions=2)
    kafka.gw.broker.create_topic("wc-out", partitions=2)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def produce(rounds: int) -> None:
        for _ in range(rounds):
            for w in words:
                p.produce("wc-in", key=w.encode(), value=w.encode())
        assert p.flush(30) == 0

    # half the input before the kill, the rest after: with all of it there, a fast app once counted all
    # 3,000 between two looks (killed_at 3000), and the kill then came after the run, not in it
    produce(n // 2)
    streams = streams_classpath()
    cmd = [
        *JAVA, "-Xmx384m", "-cp", f"{streams}:{compiled(STREAMS_APP, streams)}", "EosWordCount",
        kafka.bootstrap, "wc", str(tmp_path / "state"), "wc-in", "wc-out",
    ]  # fmt: skip
    log_path = tmp_path / "streams.out"
    with open(log_path, "w") as log:
        app = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            # the partitions' ends (in memory, at once) rather than a table read: on a loaded machine the
            # app finished all 3,000 updates while a slower look at the table was still under 600
            while time.monotonic() < deadline and _out_end(kafka) < 300:
                assert app.poll() is None, log_path.read_text()[-5000:]
                time.sleep(0.02)
            app.kill()  # SIGKILL mid-run: an open transaction, no close
            app.wait(30)
            killed_at = table_rows(kafka.gw, "wc-out").num_rows
            assert 300 <= killed_at <= n // 2 * len(words), (killed_at, log_path.read_text()[-5000:])
            produce(n - n // 2)
            app = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and table_rows(kafka.gw, "wc-out").num_rows < n * len(words):
                assert app.poll() is None, log_path.read_text()[-5000:]
                time.sleep(0.5)
        finally:
            app.kill()
            app.wait(30)
    counts = _counts(kafka, "wc-out")
    assert sorted(counts) == words, log_path.read_text()[-5000:]
    for w in words:
        assert counts[w] == list(range(1, n + 1)), (w, counts[w][:20], log_path.read_text()[-3000:])


TXN39_APP = Path(__file__).resolve().parent / "java" / "Txn39.java"


def _run_txn_app(bootstrap: str, jars: list[str], topic: str, group: str, tid: str) -> list[str]:
    """Txn39.java (commit with the group's offsets, abort, a zombie fenced, a read_committed read): its
    output lines, after checking the facts every client version must show."""
    cp = ":".join(jars)
    cmd = [*JAVA, "-Xmx256m", "-cp", f"{cp}:{compiled(TXN39_APP, cp)}", "Txn39", bootstrap, topic, group, tid]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["committed", "aborted"], out.stdout
    assert lines[2].split()[:2] == ["zombie", "refused"], out.stdout
    assert lines[2].split()[2] in ("ProducerFencedException", "InvalidProducerEpochException"), out.stdout
    assert lines[3] == "read " + ",".join(sorted(f"c{i}" for i in range(10))), out.stdout
    return lines


@pytest.mark.parametrize("level", [2, 0])
def test_the_kafka_4_java_client_on_transaction_version_2_and_with_it_off(tmp_path: Path, level: int) -> None:
    """The Java client 4.2 against a broker finalizing transaction.version 2: no AddPartitionsToTxn or
    AddOffsetsToTxn, every EndTxn bumps the epoch (InitProducerId 0, commit 1, abort 2, the new instance's
    InitProducerId 3); a transaction committed over both partitions with its group's offsets, an aborted
    one, a zombie fenced; the read_committed consumer and the table hold the committed records only. With
    the broker's ``transaction_version`` 0 the same client keeps the classic protocol (epochs 0, 1)."""
    port = free_port()
    gw, server, thread = start_gateway(tmp_path / "wh", kafka_port=port, transaction_version=level)
    try:
        gw.broker.create_topic("t4", partitions=2)
        jars = classpath().split(":")
        _run_txn_app(f"127.0.0.1:{port}", jars, "t4", "g4", "java4-txn")
        kafka = KafkaGateway(gw, f"127.0.0.1:{port}", port)
        assert sorted(v.decode() for v in _contiguous(kafka, "t4")) == sorted(f"c{i}" for i in range(10))
        assert gw.broker.groups.committed("g4")[("t4", 0)].offset == 5
        assert _epochs(gw, "java4-txn") == ([0, 1, 2, 3] if level == 2 else [0, 1])
    finally:
        stop_gateway(gw, server, thread)


def test_the_kafka_3_9_java_client_commits_aborts_and_is_fenced(kafka: KafkaGateway) -> None:
    """The Java client of Kafka 3.9 (kafka-clients 3.9.2, the one Spark's Kafka connector brings) with a
    transactional id: a committed transaction with its group's offsets, an aborted one, a zombie fenced by
    a second instance; its read_committed consumer and the table see the committed records only."""
    from kafka_jars import cache_dir, spark_kafka_jars

    clients = [j for j in spark_kafka_jars() if Path(j).name.startswith("kafka-clients-3.9.")]
    assert clients, "kafka-clients 3.9 is not among Spark's Kafka connector jars"
    classpath()  # resolves the kafka-tools jars, slf4j among them
    slf4j = sorted(str(j) for j in cache_dir().glob("slf4j-api-*.jar"))
    kafka.gw.broker.create_topic("t39", partitions=2)
    _run_txn_app(kafka.bootstrap, [*clients, *slf4j], "t39", "g39", "java39-txn")
    committed = sorted(f"c{i}" for i in range(10))
    assert sorted(v.decode() for v in _contiguous(kafka, "t39")) == committed
    assert _epochs(kafka.gw, "java39-txn") == [0, 1]  # the classic protocol: only InitProducerId bumps
    offsets = kafka.gw.broker.groups.committed("g39")
    assert offsets[("t39", 0)].offset == 5
