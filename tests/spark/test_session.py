"""The session builder: Delta configured from the local jar cache, worker Python right, delta-rs-safe."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from topiclake.jobs.jars import jar_paths
from topiclake.jobs.session import WAREHOUSE_CONF, spark_conf
from topiclake.sparkenv.jars import s3a_jar_paths


def test_delta_write_read_optimize(spark: SparkSession, warehouse: str) -> None:
    path = str(Path(warehouse) / "t")
    for start in (0, 10, 20):
        spark.range(start, start + 10).write.format("delta").mode("append").save(path)
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == list(range(30))

    metrics = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]["metrics"]
    assert metrics["numFilesRemoved"] >= 3
    assert metrics["numFilesAdded"] == 1
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    assert last["operation"] == "OPTIMIZE"
    assert spark.read.format("delta").load(path).count() == 30


def test_new_tables_stay_delta_rs_writable(spark: SparkSession, warehouse: str) -> None:
    path = str(Path(warehouse) / "t")
    spark.range(5).write.format("delta").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")

    table = DeltaTable(path)
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.writer_features
    assert not protocol.reader_features
    assert table.metadata().configuration.get("delta.enableDeletionVectors") == "false"
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 4]

    write_deltalake(path, pa.table({"id": pa.array([7], pa.int64())}), mode="append")
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2, 4, 7]


def test_runs_offline_from_jar_cache(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.jars.packages") is None
    jars = conf.get("spark.jars")
    assert jars is not None
    assert jars.split(",") == jar_paths() + s3a_jar_paths()  # Delta's, then S3A's (when resolved)
    assert conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf.get("spark.sql.catalog.spark_catalog") == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"


def test_python_udf_runs_on_workers(spark: SparkSession) -> None:
    double = F.udf(lambda x: 2 * x, LongType())
    rows = spark.range(4).repartition(2).select(double("id").alias("y")).collect()
    assert sorted(r.y for r in rows) == [0, 2, 4, 6]


def test_worker_python_is_the_project_interpreter(spark: SparkSession) -> None:
    def executable(_: int) -> str:
        import sys

        return sys.executable

    seen = set(spark.sparkContext.parallelize(range(2), 2).map(executable).collect())
    assert seen == {spark.sparkContext.getConf().get("spark.pyspark.python")}


def test_conf_overrides_and_warehouse() -> None:
    conf = spark_conf(
        "spark://127.0.0.1:7077", warehouse="/tmp/wh", conf={"spark.sql.shuffle.partitions": "8"}
    )
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf[WAREHOUSE_CONF] == "/tmp/wh"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.databricks.delta.properties.defaults.enableDeletionVectors"] == "false"
    assert "spark.jars.packages" not in conf


def test_master_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICLAKE_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert spark_conf()["spark.master"] == "spark://127.0.0.1:7077"
    monkeypatch.delenv("TOPICLAKE_SPARK_MASTER")
    assert spark_conf()["spark.master"] == "local[*]"
