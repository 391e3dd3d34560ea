"""Delta Lake's Spark jars: resolved once from Maven Central into a local cache, used offline afterwards.

``python -m topiclake.sparkenv.jars resolve`` (``make install`` runs it by its old name,
``topiclake.jobs.jars``) writes a small pom for
``io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark version>`` into the cache, lets Maven copy the
artifact and its runtime dependencies next to it, and keeps only the jars that pyspark does not ship
already (so Spark's own Hadoop, Parquet, Jackson and Scala win). :func:`jar_paths` lists the kept jars for
``spark.jars``. Spark's own ``spark-avro`` (same version as pyspark) comes along: the typed topic views of
the schema registry decode Avro records with its ``from_avro``.

Hadoop's S3A file system (``s3a://``, for Spark's own Delta reader and ``topiclake sql`` on S3) goes to a
cache of its own (:func:`s3a_cache_dir`): ``hadoop-aws`` of pyspark's Hadoop version with only the AWS SDK
v2 modules S3A loads (``s3``, ``s3-transfer-manager`` and what they need: auth, regions,
http-client-spi, apache-client, ...), not the SDK's 686 MB ``bundle``; netty and the jars pyspark ships
come from pyspark. 14 MB from Maven, ~13 MB kept (docs/spark.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

logger = logging.getLogger(__name__)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.topiclake</groupId>
  <artifactId>delta-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.delta</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-avro_2.13</artifactId>
      <version>{spark_version}</version>
    </dependency>
  </dependencies>
</project>
"""

#: hadoop-aws without the SDK bundle, plus the SDK v2 modules S3A uses (their versions: Hadoop's pom,
#: ``aws-java-sdk-v2.version``); netty is excluded (pyspark ships it).
_S3A_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.topiclake</groupId>
  <artifactId>s3a-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-aws</artifactId>
      <version>{hadoop}</version>
      <exclusions>
        <exclusion><groupId>software.amazon.awssdk</groupId><artifactId>bundle</artifactId></exclusion>
        <exclusion><groupId>org.wildfly.openssl</groupId><artifactId>wildfly-openssl</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>software.amazon.awssdk</groupId>
      <artifactId>s3</artifactId>
      <version>{sdk}</version>
      <exclusions><exclusion><groupId>io.netty</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
    <dependency>
      <groupId>software.amazon.awssdk</groupId>
      <artifactId>s3-transfer-manager</artifactId>
      <version>{sdk}</version>
      <exclusions><exclusion><groupId>io.netty</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
  </dependencies>
</project>
"""
#: The AWS SDK v2 version hadoop-aws 3.5.0 was built against (its pom's ``aws-java-sdk-v2.version``).
S3A_SDK_VERSION = "2.35.4"

_VERSION_SUFFIX = re.compile(r"-\d[^-]*(-\d+)?\.jar$")


def delta_artifact() -> tuple[str, str]:
    """Return the Maven artifact id and version of Delta's Spark jar matching the installed packages."""
    spark_version = version("pyspark")
    major_minor = ".".join(spark_version.split(".")[:2])
    return f"delta-spark_{major_minor}_2.13", version("delta-spark")


def cache_dir() -> Path:
    """Return the jar cache directory (``TOPICLAKE_JARS_DIR`` or ``~/.cache/topiclake/jars/<artifact>``)."""
    configured = os.environ.get("TOPICLAKE_JARS_DIR")
    if configured:
        return Path(configured)
    artifact, delta_version = delta_artifact()
    return Path.home() / ".cache" / "topiclake" / "jars" / f"{artifact}-{delta_version}"


def _pyspark_jar_names() -> set[str]:
    import pyspark

    jars_dir = Path(pyspark.__file__).parent / "jars"
    return {_VERSION_SUFFIX.sub("", p.name) for p in jars_dir.glob("*.jar")}


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (from its ``hadoop-client-api`` jar; under spark-submit pyspark is
    a zip and the jars are in ``$SPARK_HOME/jars``)."""
    import pyspark

    folders = [Path(pyspark.__file__).parent / "jars"]
    if os.environ.get("SPARK_HOME"):
        folders.append(Path(os.environ["SPARK_HOME"]) / "jars")
    for folder in folders:
        for jar in folder.glob("hadoop-client-api-*.jar"):
            return jar.name[len("hadoop-client-api-") : -len(".jar")]
    raise FileNotFoundError("pyspark ships no hadoop-client-api jar")


def s3a_cache_dir() -> Path:
    """The S3A jar cache: ``~/.cache/topiclake/jars/s3a-<hadoop version>`` (beside the Delta cache)."""
    return cache_dir().parent / f"s3a-{hadoop_version()}"


def s3a_jar_paths() -> list[str]:
    """The cached S3A jars (``hadoop-aws`` and the SDK modules), or [] when they were never resolved (or
    the Hadoop version is unknown here: a spark-submit driver whose Spark ships the jars itself)."""
    try:
        folder = s3a_cache_dir()
    except FileNotFoundError:
        return []
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    return jars if any(Path(j).name.startswith("hadoop-aws-") for j in jars) else []


def jar_paths() -> list[str]:
    """Return the cached Delta jars, raising with a clear instruction if they were never resolved."""
    directory = cache_dir()
    jars = sorted(str(p) for p in directory.glob("*.jar"))
    wanted = ("delta-spark_", "spark-avro_")
    if not all(any(Path(j).name.startswith(w) for j in jars) for w in wanted):
        raise FileNotFoundError(
            f"Delta's Spark jars are not in {directory}: run `make install` "
            "(or `python -m topiclake.jobs.jars resolve`) once while Maven Central is reachable"
        )
    return jars


def resolve(force: bool = False) -> list[str]:
    """Fetch the Delta jars with Maven into the cache unless they are there already."""
    directory = cache_dir()
    if not force:
        try:
            return jar_paths()
        except FileNotFoundError:
            pass
    artifact, delta_version = delta_artifact()
    logger.info("resolving io.delta:%s:%s with Maven", artifact, delta_version)
    pom = _POM.format(artifact=artifact, version=delta_version, spark_version=version("pyspark"))
    # keep what Spark lacks; RoaringBitmap's "shims" goes with the RoaringBitmap Spark ships
    _copy_dependencies(pom, directory, skip=_pyspark_jar_names() | {"shims"})
    return jar_paths()


def resolve_s3a(force: bool = False) -> list[str]:
    """Fetch the S3A jars with Maven into :func:`s3a_cache_dir` unless they are there already."""
    directory = s3a_cache_dir()
    if not force and s3a_jar_paths():
        return s3a_jar_paths()
    logger.info(
        "resolving org.apache.hadoop:hadoop-aws:%s and AWS SDK %s modules", hadoop_version(), S3A_SDK_VERSION
    )
    pom = _S3A_POM.format(hadoop=hadoop_version(), sdk=S3A_SDK_VERSION)
    # what pyspark or the Delta cache already has (commons-logging, slf4j, httpclient...) is not kept twice
    delta = {_VERSION_SUFFIX.sub("", Path(j).name) for j in jar_paths()}
    _copy_dependencies(pom, directory, skip=_pyspark_jar_names() | delta)
    return s3a_jar_paths()


def _copy_dependencies(pom_text: str, directory: Path, skip: set[str]) -> None:
    """Let Maven copy a pom's runtime dependencies; keep in ``directory`` those not named in ``skip``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed once to fetch Spark's jars: apt-get install maven")
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_text)
        out = Path(tmp) / "jars"
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={out}",
            "-DincludeScope=runtime",
        ]
        subprocess.run(cmd, check=True)
        directory.mkdir(parents=True, exist_ok=True)
        for jar in out.glob("*.jar"):
            if _VERSION_SUFFIX.sub("", jar.name) not in skip:
                shutil.copy2(jar, directory / jar.name)


def main(argv: list[str] | None = None) -> int:
    """``python -m topiclake.sparkenv.jars resolve|list`` (or ``topiclake.jobs.jars``)."""
    parser = argparse.ArgumentParser(prog="python -m topiclake.sparkenv.jars", description=__doc__)
    parser.add_argument("command", choices=["resolve", "list"], help="resolve: Delta's and S3A's jars")
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "resolve":
        jars = resolve(force=args.force) + resolve_s3a(force=args.force)
    else:
        jars = jar_paths() + s3a_jar_paths()
    for jar in jars:
        print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
