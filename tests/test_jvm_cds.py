"""The tests' Spark JVMs map their classes from the class-data-sharing archive of tests/jvm_cds.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import jvm_cds

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None, reason="needs a JDK (the Spark tests need one too)"
)


def test_a_spark_submit_jvm_loads_its_classes_from_the_archive(tmp_path: Path) -> None:
    archive = jvm_cds.spark_archive()
    if archive is None or not archive.is_file():
        pytest.skip("no archive yet: `make test` (or `python tests/jvm_cds.py`) makes it")
    import pyspark

    home = Path(pyspark.__file__).parent
    log = tmp_path / "classes.log"
    env = dict(os.environ)
    env.pop("TOPICLAKE_TEST_CDS", None)
    env["SPARK_HOME"] = str(home)
    # what tests/conftest.py gives every spark-submit driver, plus a log of where each class came from
    env["SPARK_SUBMIT_OPTS"] = (
        f"{jvm_cds.SHORT_JVM} {jvm_cds.spark_options()} -Xlog:class+load=info:file={log}"
    )
    done = subprocess.run(
        [str(home / "bin" / "spark-submit"), "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "version" in done.stderr + done.stdout
    assert "cds" not in done.stdout  # the JVM says nothing of the archive where commands print their output
    lines = log.read_text().splitlines()
    shared = [line for line in lines if "source: shared objects file" in line]
    assert any(
        "org.apache.spark.deploy.SparkSubmit source: shared objects file (top)" in line for line in lines
    )
    assert len(shared) > len(lines) // 2, f"{len(shared)} of {len(lines)} classes from the archive"


def test_no_archive_options_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICLAKE_TEST_CDS", "0")
    assert jvm_cds.spark_options() == ""
