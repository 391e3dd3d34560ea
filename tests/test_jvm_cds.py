"""Kafka's Java tools in the tests map their classes from the archive that tests/jvm_cds.py makes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "kafka"))  # kafka_jars, imported by name

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None, reason="needs a JDK (the Kafka tools' tests need one too)"
)


def test_no_archive_options_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import kafka_jars

    monkeypatch.setenv("TOPICLAKE_TEST_CDS", "0")
    assert kafka_jars.cds_options() == ()


def test_a_kafka_tool_jvm_loads_its_classes_from_the_kafka_archive(tmp_path: Path) -> None:
    """tests/kafka/kafka_jars.py's ``JAVA`` maps the Kafka tools' archive: the tool's own classes come from
    it (the archive's top layer), not from the jars."""
    import kafka_jars

    archive = kafka_jars.cds_archive()
    if archive is None or not archive.is_file():
        pytest.skip("no archive yet: `make test` (or `python tests/jvm_cds.py`) makes it")
    assert f"-XX:SharedArchiveFile={archive}" in kafka_jars.JAVA
    log = tmp_path / "classes.log"
    cmd = [*kafka_jars.JAVA, f"-Xlog:class+load=info:file={log}", "-cp", kafka_jars.classpath()]
    done = subprocess.run(
        [*cmd, "org.apache.kafka.tools.TopicCommand", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == kafka_jars.VERSION  # and nothing of the archive on stdout
    lines = log.read_text().splitlines()
    top = [line for line in lines if "source: shared objects file (top)" in line]
    assert any(
        "org.apache.kafka.tools.TopicCommand source: shared objects file (top)" in line for line in top
    )
    shared = [line for line in lines if "source: shared objects file" in line]
    assert len(shared) > len(lines) * 0.9, f"{len(shared)} of {len(lines)} classes from the archives"


def test_a_kafka_jvm_of_another_class_path_runs_without_the_archive(tmp_path: Path) -> None:
    """A class path that does not start with the archive's (the tools' jars in another order, as Kafka
    3.9's client has its own): the JVM runs, loads the tool from its jar, maps the JDK's default archive
    only and prints nothing of the other one."""
    import kafka_jars

    if not kafka_jars.cds_options():
        pytest.skip("no archive yet: `make test` (or `python tests/jvm_cds.py`) makes it")
    log = tmp_path / "classes.log"
    other = ":".join(reversed(kafka_jars.classpath().split(":")))
    cmd = [*kafka_jars.JAVA, f"-Xlog:class+load=info:file={log}", "-cp", other]
    done = subprocess.run(
        [*cmd, "org.apache.kafka.tools.TopicCommand", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, kafka_jars.VERSION), done.stderr
    text = log.read_text()
    assert "shared objects file (top)" not in text and "source: shared objects file" in text
    assert "org.apache.kafka.tools.TopicCommand source: file:" in text
