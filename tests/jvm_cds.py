"""A class-data-sharing archive for the tests' Kafka Java tools and clients: their classes mapped from a file.

``make test`` runs this first (``python tests/jvm_cds.py``) to make the archive when there is none.

A JVM parses and links every class it loads; a Kafka tool's start is mostly that. Java's class-data sharing
(CDS, JDK 13+ "dynamic archives") writes the classes a JVM loaded into an archive at its exit
(``-XX:ArchiveClassesAtExit``); a later JVM with the same class path and ``-XX:SharedArchiveFile`` maps them
instead (tests/kafka/kafka_jars.py ``JAVA``: a tool's start -35 % CPU; docs/decisions.md, "The suite,
sixth round"). The archive names each jar with its size and modification time: the tools' jars live in the
machine's jar cache (``~/.cache/topiclake/jars``), not in the ``.venv``, so one archive serves every
checkout. (Spark's jars are in the ``.venv``, new files in every clone: an archive for the Spark JVMs was
tried and dropped, decisions.md.)

The archive is made once per machine into ``~/.cache/topiclake/cds``, named by a digest of what it depends
on (the ``java`` binary, the tools' jars, the JVM options: ``kafka_jars.cds_archive``). A JVM whose class
path differs maps only the JDK's own archive, as without it; ``-Xlog:cds*=off`` keeps it from saying so on
standard output. Without an archive (none made yet, or ``TOPICLAKE_TEST_CDS=0``) nothing changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _kafka_runs(bootstrap: str) -> list[tuple[list[str], str | None]]:
    """The Kafka tools' runs whose loaded classes go into the archive: an admin, producers (plain,
    idempotent, transactional), consumers (classic and KIP-848 groups) and a group's description."""
    t, bs = "org.apache.kafka.tools.", ["--bootstrap-server", bootstrap]
    keyed = ["--property", "parse.key=true", "--property", "key.separator=:"]
    txn = ["--transactional-id", "cds-txn", "--transaction-duration-ms", "50"]
    perf = [
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "--num-records",
        "50",
        "--record-size",
        "10",
    ]
    perf += ["--throughput", "-1", *txn]
    classic = ["--group", "cds-g", "--from-beginning", "--max-messages", "5", "--timeout-ms", "20000"]
    group = ["--group-protocol", "consumer", "--max-messages", "5"]
    return [
        ([t + "TopicCommand", *bs, "--describe", "--topic", "cds"], None),
        ([t + "ConsoleProducer", *bs, "--topic", "cds", *keyed], "a:1\nb:2\n"),
        ([t + "VerifiableProducer", *bs, "--topic", "cds", "--max-messages", "5"], None),
        ([t + "ProducerPerformance", "--topic", "cds", *perf], None),
        ([t + "consumer.ConsoleConsumer", *bs, "--topic", "cds", *classic], None),
        ([t + "VerifiableConsumer", *bs, "--topic", "cds", "--group-id", "cds-v", *group], None),
        ([t + "consumer.group.ConsumerGroupCommand", *bs, "--describe", "--group", "cds-g"], None),
    ]  # fmt: skip


def make_kafka_archive() -> Path | None:
    """Make the Kafka tools' archive (tests/kafka/kafka_jars.py) if there is none. A dynamic archive holds
    what ONE JVM loaded: each tool runs once against a gateway started here, writing the classes it
    loaded to a list (``-XX:DumpLoadedClassList``); then one JVM with exactly the tools' class path loads
    all of them (tests/kafka/java/LoadClasses.java) and writes them out at its exit (~20 s, once)."""
    sys.path[:0] = [str(TESTS / "kafka"), str(TESTS / "api")]
    import kafka_jars

    archive = kafka_jars.cds_archive() if shutil.which("java") else None
    if archive is None:  # no java, or the jars not resolved yet: resolve them (Maven, once per machine)
        if shutil.which("java") is None:
            return None
        kafka_jars.classpath()
        archive = kafka_jars.cds_archive()
    if archive is None or archive.is_file():
        return archive
    from gateway_harness import start_gateway, stop_gateway

    from topiclake.process.ports import free_port

    started = time.monotonic()
    print(f"making the tests' class-data-sharing archive for Kafka's Java tools: {archive}", flush=True)
    cp = kafka_jars.classpath()
    java = ["java", *kafka_jars.SHORT_JVM]
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        gw, server, thread = start_gateway(Path(tmp) / "wh", kafka_port=port)
        try:
            gw.broker.create_topic("cds", partitions=2)
            for i, (args, stdin) in enumerate(_kafka_runs(f"127.0.0.1:{port}")):
                listed = Path(tmp) / f"classes-{i}"
                cmd = [*java, f"-XX:DumpLoadedClassList={listed}", "-cp", cp, *args]
                subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
                if listed.is_file():  # "name id: 1 super: 2 ..." lines; "@" lines are lambda forms
                    lines = listed.read_text().splitlines()
                    names.update(ln.split()[0].replace("/", ".") for ln in lines if ln[:1] not in "#@")
        finally:
            stop_gateway(gw, server, thread)
        (Path(tmp) / "classes").write_text("\n".join(sorted(names)) + "\n")
        archive.parent.mkdir(parents=True, exist_ok=True)
        for stale in archive.parent.glob("kafka-*.jsa"):  # of another java or jar set
            stale.unlink(missing_ok=True)
        partial = archive.parent / f".partial-{os.getpid()}-{archive.name}"
        loader = TESTS / "kafka" / "java" / "LoadClasses.java"
        cmd = [*java, f"-XX:ArchiveClassesAtExit={partial}", "-Xlog:cds*=off", "-cp", cp, str(loader)]
        done = subprocess.run([*cmd, str(Path(tmp) / "classes")], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not partial.is_file():
        print(f"no archive (exit {done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, archive)
    took = time.monotonic() - started
    print(f"{done.stdout.strip()}; made in {took:.0f} s ({archive.stat().st_size >> 20} MiB)", flush=True)
    return archive


if __name__ == "__main__":
    try:
        made = make_kafka_archive()
    except Exception as e:  # no Maven for the jars, a tool that did not start: the tests run without it
        print(f"no class-data-sharing archive for Kafka's tools: {e!r}", file=sys.stderr)
        made = None
    print(f"Kafka tools' JVMs of the tests: {made or 'no class-data-sharing archive'}")
