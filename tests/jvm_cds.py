"""Class-data-sharing archives for the tests' Spark JVMs and Kafka's Java tools: classes mapped from a file.

Imported by name from tests/conftest.py (like tests/xdist_units.py); ``make test`` runs it first
(``python tests/jvm_cds.py``) to make the archive when there is none.

A Spark driver parses and links ~20,000 classes before it runs a query; most of a short test JVM's CPU is
that start. Java's class-data sharing (CDS, JDK 13+ "dynamic archives") writes the classes a JVM loaded
into an archive at its exit (``-XX:ArchiveClassesAtExit``); a later JVM with the same class path and
``-XX:SharedArchiveFile`` maps them instead of reading, parsing and verifying them again (measured: a
session that writes and reads a Delta table, 17.2-18.1 -> 13.0-14.2 CPU-s; docs/decisions.md, "The
suite, sixth round").

The archive is made once per machine, like the jar cache, into ``~/.cache/topiclake/cds``: its name is a
digest of what it depends on (the ``java`` binary, pyspark's jars, the Delta and S3A jar caches and the
JVM options), so a change of any of them makes a new one. A JVM whose class path does not start with the
archive's (another ``SPARK_CONF_DIR``, Kafka's tools) ignores it and loads its classes as before:
``-Xlog:cds*=off`` keeps the JVM from saying so on standard output, where tests read what a command
prints. Without an archive (none made yet, or ``TOPICLAKE_TEST_CDS=0``) nothing changes.

Kafka's tools and clients (tests/kafka/kafka_jars.py ``JAVA``) have an archive of their own,
``kafka-<digest>`` (java, the tools' jars, the options): :func:`make_kafka_archive` runs the tools once
against a gateway and loads all their classes in one JVM, whose archive then serves every tool (a start
-35 % CPU).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: bytecode verification of the class path's classes off: 13-15 % of a short Spark JVM's CPU
#: (docs/decisions.md, "The suite, fourth round"). An archive made with it off serves only JVMs with it off.
NO_VERIFY = "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
#: The JVM options of every short Spark JVM of the tests (tests/conftest.py says why).
SHORT_JVM = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData {NO_VERIFY}"

CACHE = Path.home() / ".cache" / "topiclake" / "cds"

#: What the archive's JVM runs: a Delta table written, read and queried with SQL, as most tests do.
_WORKLOAD = """
import sys, tempfile
from topiclake.sparkenv.session import get_spark
spark = get_spark("local[2]", "topiclake-cds", conf={"spark.ui.showConsoleProgress": "false"})
root = tempfile.mkdtemp()
spark.range(100).selectExpr("id", "cast(id as string) as v").write.format("delta").save(root + "/t")
spark.read.format("delta").load(root + "/t").where("id > 3").groupBy("v").count().collect()
spark.sql(f"SELECT count(*) FROM delta.`{root}/t`").collect()
spark.stop()
"""


def _digest() -> str | None:
    """What the archive depends on, as a short digest; None without ``java`` or pyspark."""
    java = shutil.which("java")
    pyspark = importlib.util.find_spec("pyspark")  # found, not imported
    if java is None or pyspark is None or not pyspark.submodule_search_locations:
        return None
    from topiclake.sparkenv.jars import jar_paths, s3a_jar_paths

    java_binary = Path(java).resolve()
    parts = [str(java_binary), str(java_binary.stat().st_mtime_ns), SHORT_JVM]
    spark_jars = Path(pyspark.submodule_search_locations[0]) / "jars"
    parts += sorted(f"{p.name}:{p.stat().st_size}" for p in spark_jars.glob("*.jar"))
    parts += [*jar_paths(), *s3a_jar_paths()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def spark_archive() -> Path | None:
    """The Spark archive of this machine's java, pyspark and jars (it may not exist yet)."""
    digest = _digest()
    return None if digest is None else CACHE / f"spark-{digest}.jsa"


def spark_options() -> str:
    """The JVM options that map the Spark archive, or "" when there is none (or it is turned off)."""
    if os.environ.get("TOPICLAKE_TEST_CDS", "1") == "0":
        return ""
    archive = spark_archive()
    if archive is None or not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"


def make_spark_archive() -> Path | None:
    """Make the Spark archive if there is none: one short session with the tests' JVM options that
    writes its loaded classes out at exit (~1 minute, once per machine)."""
    archive = spark_archive()
    if archive is None or archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in archive.parent.glob("spark-*.jsa"):  # of another java, pyspark or jar set
        stale.unlink(missing_ok=True)
    fd, partial = tempfile.mkstemp(dir=archive.parent, prefix=".partial-", suffix=".jsa")
    os.close(fd)
    os.unlink(partial)
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = f"{SHORT_JVM} -XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off"
    env["SPARK_LAUNCHER_OPTS"] = SHORT_JVM
    started = time.monotonic()
    print(f"making the tests' class-data-sharing archive for Spark JVMs: {archive}", flush=True)
    done = subprocess.run(
        [sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, text=True, timeout=600
    )
    # the JVM writes the archive at its exit, and pyspark does not wait for its JVM: wait until no
    # process has the file open any more
    deadline = time.monotonic() + 120
    last = -1
    while time.monotonic() < deadline:
        size = os.path.getsize(partial) if os.path.exists(partial) else -1
        if size > 0 and size == last and not _dumping(partial):
            break
        last = size
        time.sleep(1)
    if done.returncode != 0 or not os.path.exists(partial):
        print(f"no archive (exit {done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
        Path(partial).unlink(missing_ok=True)
        return None
    os.replace(partial, archive)
    print(f"made in {time.monotonic() - started:.0f} s ({archive.stat().st_size >> 20} MiB)", flush=True)
    return archive


def _dumping(path: str) -> bool:
    """Whether a JVM still has ``path`` open (it writes the archive at its exit)."""
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                if os.readlink(fd) == path:
                    return True
        except OSError:
            continue
    return False


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
    made = make_spark_archive()
    print(f"Spark JVMs of the tests: {made or 'no class-data-sharing archive (no java or pyspark)'}")
    try:
        made = make_kafka_archive()
    except Exception as e:  # no Maven for the jars, a tool that did not start: the tests run without it
        print(f"no class-data-sharing archive for Kafka's tools: {e!r}", file=sys.stderr)
        made = None
    print(f"Kafka tools' JVMs of the tests: {made or 'no class-data-sharing archive'}")
