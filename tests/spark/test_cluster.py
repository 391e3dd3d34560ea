"""topiclake on a real Spark standalone cluster (master + worker on free 127.0.0.1 ports), through
spark-submit with the packed Python environment (``--archives``) and the project's code (``--py-files``):

1. the compaction job (``topiclake.jobs.compact``) merges a topic's small files; every record the broker
   acknowledged is still served with the same offset, and the broker appends after it;
2. executors run the SHIPPED environment: their Python and deltalake come from the unpacked archive in the
   worker's work directory, topiclake from the shipped zip, nothing from the repository or its .venv;
3. ``spark.read.format("topiclake")`` reads the compacted topic on the cluster, in the same session as (2).

All three are one application (one spark-submit, one driver JVM, one set of executors): its driver runs
the compaction job's ``main`` -- as the submitted ``compact`` job's launcher does -- in the session it then
probes and reads with. (Two submissions cost a second driver and executor start, ~25 CPU-s.)

The environment archive is built once per machine and cached (``~/.cache/topiclake/envs``): the first run
pays the packing (minutes), later runs only start the cluster and submit one application.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import topiclake
from topiclake.jobs.cluster import StandaloneCluster, local_cluster
from topiclake.jobs.pyenv import PackedEnv, build_env
from topiclake.jobs.submit import submit
from topiclake.platform import Broker, BrokerConfig, Record, Storage

logger = logging.getLogger(__name__)

# Building the environment the first time on a busy 2-core machine takes minutes; later runs are fast.
pytestmark = pytest.mark.timeout(1200)

TOPIC = "orders"
PARTITIONS = 2
ROUNDS = 10  # produce calls (one Delta commit, one file) per partition
PER_ROUND = 4
# A round is ~220 bytes: segments of ~4 files, so each partition has a few sealed segments to compact.
SEGMENT_BYTES = "800"
BASE_TS = 1_700_000_000_000
SUBMIT_TIMEOUT_S = 420

# (partition, offset) -> (key, value, headers, timestamp ms)
Produced = dict[tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]

# Runs on the cluster's driver (shipped with --py-files): the compaction job's main (which takes the
# running session and leaves it running), then the probe of topiclake.jobs.submit and a read with the
# topiclake data source in the same session; writes one JSON file.
CLUSTER_APP = """
import json
from pathlib import Path


def main(args):
    from pyspark.sql import functions as F

    from topiclake.jobs import compact
    from topiclake.jobs.session import get_spark
    from topiclake.jobs.submit import probe

    warehouse, topic, output = args
    spark = get_spark(None, "topiclake-cluster-app", warehouse=warehouse)
    compacted = compact.main(["--warehouse", warehouse, "--topic", topic, "--min-files", "2"])
    df = (
        spark.read.format("topiclake")
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .withColumn("ts_ms", F.unix_millis("timestamp"))
    )
    records = [
        {
            "partition": r["partition"],
            "offset": r["offset"],
            "key": None if r["key"] is None else bytes(r["key"]).hex(),
            "value": None if r["value"] is None else bytes(r["value"]).hex(),
            "headers": [[h["key"], None if h["value"] is None else bytes(h["value"]).hex()]
                        for h in r["headers"] or []],
            "ts_ms": r["ts_ms"],
        }
        for r in df.collect()
    ]
    report = {
        "compact_exit": compacted,
        "master": spark.sparkContext.master,
        "executors": probe(spark, 2),
        "records": records,
    }
    Path(output).write_text(json.dumps(report))
    return 0
"""


@dataclass
class Topic:
    warehouse: str
    uri: str
    produced: Produced


def _produce(broker: Broker, produced: Produced, round_: int) -> None:
    for p in range(PARTITIONS):
        records = [
            Record(
                key=None if i == 1 else f"k{p}-{round_}-{i}".encode(),
                value=f"value {p}/{round_}/{i}".encode(),
                headers=[("h", f"x{i}".encode()), ("n", None)] if i != 2 else None,
                timestamp_ms=BASE_TS + 1000 * round_ + i,
            )
            for i in range(PER_ROUND)
        ]
        results = broker.produce(TOPIC, records, partition=p, acks="all")
        for r, rec in zip(results, records, strict=True):
            assert r.error is None and r.offset is not None
            assert rec.timestamp_ms is not None
            produced[(p, r.offset)] = (rec.key, rec.value, list(rec.headers or []), rec.timestamp_ms)


def _served(broker: Broker) -> Produced:
    """Every record the broker serves, from each partition's log start to its end."""
    out: Produced = {}
    for p in range(PARTITIONS):
        offset = broker.list_offsets(TOPIC, p, "earliest")
        end = broker.list_offsets(TOPIC, p, "latest")
        assert offset is not None and end is not None
        while offset < end:
            result = broker.fetch(TOPIC, partition=p, offset=offset, max_records=1000)
            assert result.records.num_rows > 0, f"fetch at {offset} < end {end} returned nothing"
            for row in result.records.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"] or []]
                out[(p, row["offset"])] = (
                    row["key"],
                    row["value"],
                    headers,
                    round(row["timestamp"].timestamp() * 1000),
                )
            offset = result.next_offset
    return out


def _files_by_segment(uri: str) -> dict[tuple[int, int], int]:
    """Number of data files per (partition, segment)."""
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
    counts: dict[tuple[int, int], int] = {}
    for action in actions:
        key = (int(action["partition.partition"]), int(action["partition.segment"]))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _under(path: str, directory: Path) -> bool:
    """``path`` is inside ``directory`` (links in the parents resolved; a venv's bin/python is itself a
    link to the base interpreter, so the last component is not)."""
    real = Path(os.path.realpath(os.path.dirname(os.path.abspath(path)))) / os.path.basename(path)
    return real.is_relative_to(os.path.realpath(directory))


@pytest.fixture(scope="module")
def packed_env() -> PackedEnv:
    """The executors' environment archive, built on first use and cached across runs."""
    started = time.monotonic()
    env = build_env()
    logger.info(
        "executor environment %s ready in %.1f s (built: %s)",
        env.key,
        time.monotonic() - started,
        env.build_seconds > 0,
    )
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, packed_env: PackedEnv) -> Iterator[StandaloneCluster]:
    """A master and a worker (2 cores, 2g) on free 127.0.0.1 ports, always stopped at the end."""
    with local_cluster(tmp_path_factory.mktemp("spark-cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def topic(tmp_path_factory: pytest.TempPathFactory) -> Topic:
    """A 2-partition topic of many one-commit files, produced by a broker that is then closed."""
    warehouse = str(tmp_path_factory.mktemp("wh"))
    storage = Storage(warehouse)
    produced: Produced = {}
    with Broker(storage, BrokerConfig(maintenance=False, linger_ms=0)) as broker:
        broker.create_topic(
            TOPIC, partitions=PARTITIONS, configs={"retention.ms": "-1", "segment.bytes": SEGMENT_BYTES}
        )
        for round_ in range(ROUNDS):
            _produce(broker, produced, round_)
    return Topic(warehouse, storage.topic_uri(TOPIC), produced)


def _submit(cluster: StandaloneCluster, env: PackedEnv, job: str, args: list[str], **kw: object) -> None:
    """spark-submit ``job`` and check it ran as one application of this cluster."""
    apps_before = set(cluster.work_dir.glob("app-*"))
    # the executors take the JVM options of the tests' other Spark JVMs (tests/conftest.py)
    java_options = os.environ.get("SPARK_SUBMIT_OPTS")
    result = submit(
        job,
        args,
        master=cluster.master_url,
        env=env,
        conf={"spark.executor.extraJavaOptions": java_options} if java_options else None,
        capture_output=True,
        timeout_s=SUBMIT_TIMEOUT_S,
        **kw,  # type: ignore[arg-type]
    )
    if result.returncode != 0:
        logs = sorted(cluster.work_dir.glob("app-*/*/stderr"))
        tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-40:]) if logs else ""
        pytest.fail(
            f"spark-submit {job} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-6000:]}\nlast executor stderr:\n{tail}"
        )
    # it ran on the cluster (not in a local[*] session of the driver): one new application work dir
    new_apps = set(cluster.work_dir.glob("app-*")) - apps_before
    assert len(new_apps) == 1, new_apps


def test_one_application_compacts_runs_the_shipped_environment_and_reads_the_topic(
    cluster: StandaloneCluster, packed_env: PackedEnv, topic: Topic, tmp_path: Path
) -> None:
    before = _files_by_segment(topic.uri)
    newest = {p: max(s for q, s in before if q == p) for p in range(PARTITIONS)}
    sealed_before = {k: n for k, n in before.items() if k[1] != newest[k[0]]}
    assert sealed_before and all(n >= 2 for n in sealed_before.values()), before

    driver_module = tmp_path / "cluster_app.py"
    driver_module.write_text(CLUSTER_APP)
    output = tmp_path / "report.json"
    _submit(
        cluster,
        packed_env,
        "cluster_app:main",
        [topic.warehouse, TOPIC, str(output)],
        py_files=[str(driver_module)],
    )
    report = json.loads(output.read_text())
    assert report["master"] == cluster.master_url
    assert report["compact_exit"] == 0

    # (1) the job merged the sealed segments' files
    after = _files_by_segment(topic.uri)
    assert sum(after.values()) < sum(before.values()), (before, after)
    sealed_after = {k: n for k, n in after.items() if k in sealed_before}
    assert sealed_after.keys() == sealed_before.keys(), (before, after)
    assert all(sealed_after[k] <= sealed_before[k] for k in sealed_before), (before, after)
    assert sum(sealed_after.values()) < sum(sealed_before.values()), (before, after)

    # (2) every executor task ran the archive's Python with its deltalake, and topiclake from the zip
    repo_src = Path(topiclake.__file__).parent.parent
    executors = report["executors"]
    assert len(executors) == 2
    for seen in executors:
        workdir = Path(seen["cwd"])
        assert _under(str(workdir), cluster.work_dir), seen
        assert _under(seen["executable"], workdir / "environment"), seen
        assert _under(seen["prefix"], workdir / "environment"), seen
        assert _under(seen["deltalake"], workdir / "environment"), seen
        assert _under(seen["pyarrow"], workdir / "environment"), seen
        assert _under(seen["topiclake"], workdir / "topiclake.zip"), seen
        for path in (seen["executable"], seen["deltalake"], seen["topiclake"]):
            assert not _under(path, repo_src), seen
            assert not _under(path, Path(sys.prefix)), seen
        assert seen["deltalake_version"] == deltalake.__version__

    # (3) the topiclake data source on the cluster returns exactly what the broker acknowledged
    read: Produced = {}
    for r in report["records"]:
        key = (r["partition"], r["offset"])
        assert key not in read, f"duplicate {key}"
        read[key] = (
            None if r["key"] is None else bytes.fromhex(r["key"]),
            None if r["value"] is None else bytes.fromhex(r["value"]),
            [(k, None if v is None else bytes.fromhex(v)) for k, v in r["headers"]],
            r["ts_ms"],
        )
    assert read == topic.produced

    # (1) the gateway's core still serves every acknowledged record at its offset, and appends after them
    with Broker(Storage(topic.warehouse), BrokerConfig(maintenance=False, linger_ms=0)) as broker:
        assert _served(broker) == topic.produced
        ends = {p: broker.list_offsets(TOPIC, p, "latest") for p in range(PARTITIONS)}
        more: Produced = {}
        _produce(broker, more, ROUNDS)
        assert {p for p, _ in more} == set(range(PARTITIONS))
        assert all(o >= ends[p] for p, o in more), (ends, sorted(more))  # type: ignore[operator]
        assert _served(broker) == {**topic.produced, **more}


def test_stop_releases_the_cluster(cluster: StandaloneCluster) -> None:
    """Last test of the module: stop() ends both daemons and frees the master port; it is idempotent."""
    port = cluster.spec.master_port
    assert cluster.status().running
    cluster.stop()
    assert not StandaloneCluster(cluster.state_dir).status().running
    cluster.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
