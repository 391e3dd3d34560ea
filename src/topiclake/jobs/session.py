"""The one Spark session builder: Delta from the local jar cache, the project's Python on the workers.

Every Spark entry point (jobs, the CLI's ``sql`` command, tests) gets its session from :func:`get_spark`,
so a topic table written by Spark stays one that delta-rs can read *and* write: the builder switches off
the table features Delta's Spark connector would otherwise enable by default and delta-rs cannot write.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from topiclake.jobs.jars import jar_paths

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Environment variable naming the default master (``local[*]`` when unset).
MASTER_ENV = "TOPICLAKE_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"

#: Spark conf key carrying the topiclake warehouse URI, for jobs and the ``topiclake`` data source.
WAREHOUSE_CONF = "spark.topiclake.warehouse"

_DELTA_DEFAULTS = "spark.databricks.delta.properties.defaults."

#: Delta settings that keep every table Spark creates or rewrites writable by delta-rs 1.6.6.
#: Each feature below, once on a table, makes ``write_deltalake(..., mode="append")`` of deltalake 1.6.6
#: fail (measured against delta-spark 4.4.0): "Unsupported table features required: [...]" or "reader
#: features ... not yet supported by the deltalake reader". delta-spark 4.4 leaves them off for new tables
#: by default; pinning the defaults keeps it so whatever a cluster's or a user's spark-defaults say.
DELTA_RS_COMPATIBLE_CONF: dict[str, str] = {
    # Deletion vectors (reader+writer feature): DELETE/UPDATE/MERGE would mark rows in a bitmap.
    _DELTA_DEFAULTS + "enableDeletionVectors": "false",
    # Row tracking (writer features rowTracking + domainMetadata): delta-rs does not assign row ids.
    _DELTA_DEFAULTS + "enableRowTracking": "false",
    # Type widening (reader+writer feature typeWidening).
    _DELTA_DEFAULTS + "enableTypeWidening": "false",
    # V2 checkpoints (reader+writer feature v2Checkpoint): sidecar files and a checkpoint manifest.
    _DELTA_DEFAULTS + "checkpointPolicy": "classic",
    # In-commit timestamps (writer feature inCommitTimestamp).
    _DELTA_DEFAULTS + "enableInCommitTimestamps": "false",
    # Column mapping renames physical columns; topic tables are read by name everywhere (the core
    # refuses tables with it).
    _DELTA_DEFAULTS + "columnMapping.mode": "none",
    # Even on a table that somehow has DVs enabled, DELETE/UPDATE/MERGE rewrite files instead of
    # writing deletion vectors.
    "spark.databricks.delta.delete.deletionVectors.persistent": "false",
    "spark.databricks.delta.update.deletionVectors.persistent": "false",
    "spark.databricks.delta.merge.deletionVectors.persistent": "false",
}


def _register_topiclake(spark: SparkSession) -> None:
    """Call ``topiclake.spark.register(spark)`` when that package provides it."""
    try:
        module = importlib.import_module("topiclake.spark")
    except ImportError:  # pragma: no cover - the package ships with topiclake
        return
    register = getattr(module, "register", None)
    if callable(register):
        register(spark)


def spark_conf(
    master: str | None = None,
    app_name: str = "topiclake",
    *,
    warehouse: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the Spark configuration :func:`get_spark` applies (overrides in ``conf`` win).

    Args:
        master: Spark master URL; defaults to ``$TOPICLAKE_SPARK_MASTER`` or ``local[*]``.
        app_name: Application name shown by the cluster.
        warehouse: topiclake warehouse URI, exposed to jobs as ``spark.topiclake.warehouse``.
        conf: Extra or overriding settings.
    """
    resolved_master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    settings: dict[str, str] = {
        "spark.master": resolved_master,
        "spark.app.name": app_name,
        # Delta from the jar cache: offline, no Ivy resolution at startup.
        "spark.jars": ",".join(jar_paths()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Without these, Python UDFs and Python data sources fail with
        # "Python worker failed to connect back" when another python is first on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.session.timeZone": "UTC",
        **DELTA_RS_COMPATIBLE_CONF,
    }
    if resolved_master.startswith("local"):
        settings["spark.sql.shuffle.partitions"] = "4"
        # Delta rebuilds a snapshot with 50 tasks and VACUUM lists a table with 10000 tasks by default:
        # minutes of scheduling overhead on a laptop for tables of a few hundred files.
        settings["spark.databricks.delta.snapshotPartitions"] = "4"
        settings["spark.sql.sources.parallelPartitionDiscovery.parallelism"] = "4"
    if importlib.util.find_spec("pandas") is None:
        # Spark 4 runs Python UDFs through Arrow by default, which needs pandas; without it every UDF
        # warns and falls back to pickling anyway.
        settings["spark.sql.execution.pythonUDF.arrow.enabled"] = "false"
    if warehouse is not None:
        settings[WAREHOUSE_CONF] = warehouse
    settings.update(conf or {})
    return settings


def get_spark(
    master: str | None = None,
    app_name: str = "topiclake",
    *,
    warehouse: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or return the running) Spark session configured for Delta and topiclake.

    Works with ``local[*]`` and with a standalone cluster (``spark://host:7077``); the Delta jars come
    from the local cache filled once by ``python -m topiclake.jobs.jars resolve`` and are shipped to
    executors by Spark itself.

    Args:
        master: Spark master URL; defaults to ``$TOPICLAKE_SPARK_MASTER`` or ``local[*]``.
        app_name: Application name shown by the cluster.
        warehouse: topiclake warehouse URI, exposed to jobs as ``spark.topiclake.warehouse``.
        conf: Extra or overriding Spark settings (they win over the builder's).

    Returns:
        The active session, with log level WARN and the ``topiclake`` data source registered when
        ``topiclake.spark.register`` exists.
    """
    from pyspark.sql import SparkSession

    settings = spark_conf(master, app_name, warehouse=warehouse, conf=conf)
    # The launcher reads the worker Python from the environment as well as from the conf.
    os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    # Block manager and RPC endpoints bind where the driver does, not to the host's first interface.
    os.environ.setdefault("SPARK_LOCAL_IP", settings["spark.driver.bindAddress"])
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _register_topiclake(spark)
    logger.info("spark session %s on %s", app_name, settings["spark.master"])
    return spark
