"""Apache Kafka's Java client and tools (kafka-tools 4.2.0 and its runtime closure, without Connect), and
Spark's Kafka connector (spark-sql-kafka-0-10 for the installed PySpark), resolved once from Maven Central
with Maven into ``~/.cache/topiclake/jars/`` (like Delta's jars in :mod:`topiclake.jobs.jars`), offline
afterwards."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

VERSION = "4.2.0"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.topiclake</groupId><artifactId>kafka-tools-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{v}</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId>
      </exclusion></exclusions></dependency>
  </dependencies>
</project>
"""


_SPARK_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.topiclake</groupId><artifactId>spark-kafka-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{v}</version></dependency>
  </dependencies>
</project>
"""
_STREAMS_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.topiclake</groupId><artifactId>kafka-streams-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>{v}</version>
    </dependency>
  </dependencies>
</project>
"""
# What the tools' closure lacks of kafka-streams' (the client, compression codecs and slf4j are there).
_STREAMS_KEEP = ("kafka-streams", "rocksdbjni")

# What PySpark lacks of the connector's closure (it ships Scala, Hadoop, lz4, snappy and slf4j itself).
_SPARK_KEEP = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def _resolve(pom_text: str, directory: Path, keep: tuple[str, ...] | None = None) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed once to fetch Kafka's jars: apt-get install maven")
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_text)
        out = Path(tmp) / "jars"
        # plugin 3.8.1: the default 2.8 also asks for Spark's test jars, which Central does not serve
        goal = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
        cmd = [mvn, "-q", "-B", "-f", str(pom), goal, f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
        subprocess.run(cmd, check=True, timeout=600)
        directory.mkdir(parents=True, exist_ok=True)
        for jar in out.glob("*.jar"):
            if keep is None or jar.name.startswith(keep):
                shutil.copy2(jar, directory / jar.name)
    (directory / ".ok").touch()


@contextmanager
def _resolving(directory: Path) -> Iterator[bool]:
    """Held while ``directory`` is resolved; yields whether it still needs resolving. pytest-xdist workers
    (and benchmarks) may ask at once: one resolves, the others wait for its ``.ok`` and copy nothing."""
    if (directory / ".ok").exists():
        yield False
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield not (directory / ".ok").exists()


def spark_kafka_jars() -> list[str]:
    """The jars Spark's ``format("kafka")`` needs on top of PySpark, resolved on first use."""
    from importlib.metadata import version

    spark = version("pyspark")
    directory = Path.home() / ".cache" / "topiclake" / "jars" / f"spark-sql-kafka-{spark}"
    with _resolving(directory) as needed:
        if needed:
            _resolve(_SPARK_POM.format(v=spark), directory, _SPARK_KEEP)
    return sorted(str(p) for p in directory.glob("*.jar"))


#: The options of ``java`` for the tests' Kafka clients and tools: the C1 compiler alone, the serial collector
#: and no perf data file, as tests/conftest.py gives every Spark JVM of the tests (a JVM that lives seconds
#: and runs cold code: C2's compiler threads and the parallel collector cost more CPU than they return on
#: 2 shared cores; measured in docs/decisions.md, "The suite, third round"), and no bytecode verification
#: of the class path's classes (-15 % of a VerifiableProducer's start: "The suite, fourth round").
SHORT_JVM = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:-BytecodeVerificationRemote",
)


def cds_archive() -> Path | None:
    """The class-data-sharing archive of this machine's ``java`` and Kafka jars (it may not exist yet; made
    by ``python tests/jvm_cds.py``); None without ``java`` or before the jars are resolved. Its name is a
    digest of what it depends on, so another JDK, jar set or option set makes another one."""
    java = shutil.which("java")
    directory = cache_dir()
    if java is None or not (directory / ".ok").exists():
        return None
    binary = Path(java).resolve()
    parts = [str(binary), str(binary.stat().st_mtime_ns), *SHORT_JVM]
    parts += sorted(f"{p.name}:{p.stat().st_size}" for p in directory.glob("*.jar"))
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "topiclake" / "cds" / f"kafka-{digest}.jsa"


def cds_options() -> tuple[str, ...]:
    """The options that map the Kafka archive's classes (-35 % of a tool's start: docs/decisions.md, "The
    suite, sixth round"), or none when there is no archive or ``TOPICLAKE_TEST_CDS=0``. A JVM whose class
    path does not start with the tools' (Kafka 3.9's client) maps only the JDK's default archive, as
    without them; ``-Xlog:cds*=off`` keeps the JVM from saying so where tests read its output."""
    if os.environ.get("TOPICLAKE_TEST_CDS", "1") == "0":
        return ()
    archive = cds_archive()
    if archive is None or not archive.is_file():
        return ()
    return (f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off")


def compiled(source: Path, class_path: str) -> str:
    """The directory of ``source`` (a one-class Java program) compiled against ``class_path``, once per
    machine into ``~/.cache/topiclake/java-classes`` (keyed by a digest of the source, the jars and
    ``javac``): ``java File.java`` compiles it again in every run (~0.5-1 CPU-s). Append it to the class
    path, after the jars, so the Kafka archive still applies, and run the class by its name."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac (a JDK) is needed to compile " + source.name)
    binary = Path(javac).resolve()
    parts = [source.read_text(), str(binary), str(binary.stat().st_mtime_ns)]
    parts += [Path(j).name for j in class_path.split(os.pathsep)]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    target = Path.home() / ".cache" / "topiclake" / "java-classes" / f"{source.stem}-{digest}"
    if (target / f"{source.stem}.class").is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=target.parent, prefix=".partial-")
    try:
        cmd = [javac, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-cp", class_path, "-d", tmp]
        subprocess.run([*cmd, str(source)], check=True, timeout=180)
        with suppress(OSError):  # another worker compiled it at the same time: keep that one
            os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def cache_dir() -> Path:
    """Where the jars are kept (``TOPICLAKE_KAFKA_JARS_DIR`` overrides)."""
    configured = os.environ.get("TOPICLAKE_KAFKA_JARS_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "topiclake" / "jars" / f"kafka-tools-{VERSION}"


def classpath() -> str:
    """The Java classpath of Kafka's tools, resolving it with Maven on first use."""
    directory = cache_dir()
    with _resolving(directory) as needed:
        if needed:
            _resolve(_POM.format(v=VERSION), directory)
    return os.pathsep.join(sorted(str(p) for p in directory.glob("*.jar")))


#: ``java`` for the tests' Kafka clients and tools, with the Kafka archive's classes when there is one.
JAVA = ("java", *SHORT_JVM, *cds_options())


def copier_command(bootstrap: str, partition: int) -> list[str]:
    """Kafka's transactions system test's copier of one input partition of ``sin`` to ``sout``: its
    transactional id is the partition's, so a restart fences the killed instance; random aborts, the
    group's metadata with the offsets. A 10-s transaction timeout, as Kafka's system test keeps it below
    the consumer's 60-s API timeout: a restarted copier asks for its stable position before its
    InitProducerId, so it waits for the killed instance's open transaction to time out."""
    return [
        *JAVA, "-Xmx256m", "-cp", classpath(), "org.apache.kafka.tools.TransactionalMessageCopier",
        "--broker-list", bootstrap,
        "--transactional-id", f"copier-{partition}",
        "--input-topic", "sin",
        "--input-partition", str(partition),
        "--output-topic", "sout",
        "--consumer-group", "copiers",
        "--transaction-size", "200",
        "--transaction-timeout", "10000",
        "--enable-random-aborts",
        "--use-group-metadata",
    ]  # fmt: skip


def stop_copiers(copiers: Sequence[subprocess.Popen[bytes]], logs: Sequence[IO[str]]) -> None:
    """Kill the copiers still running (a test that failed midway) and close their output files."""
    for c in copiers:
        if c.poll() is None:
            c.kill()
            c.wait(30)
    for f in logs:
        f.close()


def streams_classpath() -> str:
    """The tools' classpath plus kafka-streams (and RocksDB's JNI jar), resolved on first use."""
    directory = cache_dir().parent / f"kafka-streams-{VERSION}"
    with _resolving(directory) as needed:
        if needed:
            _resolve(_STREAMS_POM.format(v=VERSION), directory, _STREAMS_KEEP)
    extra = [str(p) for p in sorted(directory.glob("*.jar"))]
    return os.pathsep.join([classpath(), *extra])
