"""Delta Lake's Spark jars: resolved once from Maven Central into a local cache, used offline afterwards.

``python -m topiclake.sparkenv.jars resolve`` (``make install`` runs it by its old name,
``topiclake.jobs.jars``) writes a small pom for
``io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark version>`` into the cache, lets Maven copy the
artifact and its runtime dependencies next to it, and keeps only the jars that pyspark does not ship
already (so Spark's own Hadoop, Parquet, Jackson and Scala win). :func:`jar_paths` lists the kept jars for
``spark.jars``. Spark's own ``spark-avro`` (same version as pyspark) comes along: the typed topic views of
the schema registry decode Avro records with its ``from_avro``.
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
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed once to fetch Delta's Spark jars: apt-get install maven")
    artifact, delta_version = delta_artifact()
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(
            _POM.format(artifact=artifact, version=delta_version, spark_version=version("pyspark"))
        )
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
        logger.info("resolving io.delta:%s:%s with Maven", artifact, delta_version)
        subprocess.run(cmd, check=True)
        shipped = _pyspark_jar_names()
        directory.mkdir(parents=True, exist_ok=True)
        for jar in out.glob("*.jar"):
            name = _VERSION_SUFFIX.sub("", jar.name)
            # keep what Spark lacks; RoaringBitmap's "shims" goes with the RoaringBitmap Spark ships
            if name not in shipped and name != "shims":
                shutil.copy2(jar, directory / jar.name)
    return jar_paths()


def main(argv: list[str] | None = None) -> int:
    """``python -m topiclake.sparkenv.jars resolve|list`` (or ``topiclake.jobs.jars``)."""
    parser = argparse.ArgumentParser(prog="python -m topiclake.sparkenv.jars", description=__doc__)
    parser.add_argument("command", choices=["resolve", "list"])
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    jars = resolve(force=args.force) if args.command == "resolve" else jar_paths()
    for jar in jars:
        print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
