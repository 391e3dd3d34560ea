"""Apache Kafka's Java client and tools (kafka-tools 4.2.0 and its runtime closure, without Connect),
resolved once from Maven Central with Maven into ``~/.cache/topiclake/jars/kafka-tools-<version>`` (like
Delta's jars in :mod:`topiclake.jobs.jars`), offline afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

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


def cache_dir() -> Path:
    """Where the jars are kept (``TOPICLAKE_KAFKA_JARS_DIR`` overrides)."""
    configured = os.environ.get("TOPICLAKE_KAFKA_JARS_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "topiclake" / "jars" / f"kafka-tools-{VERSION}"


def classpath() -> str:
    """The Java classpath of Kafka's tools, resolving it with Maven on first use."""
    directory = cache_dir()
    if not (directory / ".ok").exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("Maven (mvn) is needed once to fetch Kafka's jars: apt-get install maven")
        with tempfile.TemporaryDirectory() as tmp:
            pom = Path(tmp) / "pom.xml"
            pom.write_text(_POM.format(v=VERSION))
            out = Path(tmp) / "jars"
            cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
            cmd += [f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
            subprocess.run(cmd, check=True, timeout=600)
            directory.mkdir(parents=True, exist_ok=True)
            for jar in out.glob("*.jar"):
                shutil.copy2(jar, directory / jar.name)
        (directory / ".ok").touch()
    return os.pathsep.join(sorted(str(p) for p in directory.glob("*.jar")))
