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
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from topiclake.errors import InvalidRequest, StorageError
from topiclake.sparkenv.jars import jar_paths, s3a_jar_paths
from topiclake.sparkenv.s3a import configure as configure_s3a
from topiclake.sparkenv.s3a import s3a_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Environment variable naming the default master (``local[*]`` when unset).
MASTER_ENV = "TOPICLAKE_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"

#: Spark conf key carrying the topiclake warehouse URI, for jobs and the ``topiclake`` data source.
WAREHOUSE_CONF = "spark.topiclake.warehouse"

#: Where the persistent local Spark catalog lives below a local warehouse (see :func:`catalog_conf`).
CATALOG_DIR = "_system/spark_catalog"

_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

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


def _worker_python() -> str:
    """The executors' Python: spark-submit's when it launched this driver, else this interpreter.

    Under spark-submit (``PYSPARK_GATEWAY_PORT`` set) the submitter may have chosen a shipped environment
    (``--conf spark.pyspark.python=./environment/bin/python``, see topiclake.jobs.submit); spark-submit hands
    it to the driver as ``PYSPARK_PYTHON`` and overriding it would run executors on the driver's venv.
    """
    if os.environ.get("PYSPARK_GATEWAY_PORT") and os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"]
    return sys.executable


def _register_topiclake(spark: SparkSession) -> None:
    """Call ``topiclake.spark.register(spark)`` when that package provides it."""
    try:
        module = importlib.import_module("topiclake.spark")
    except ImportError:  # pragma: no cover - the package ships with topiclake
        return
    register = getattr(module, "register", None)
    if callable(register):
        register(spark)


def local_warehouse(warehouse: str) -> Path | None:
    """The absolute local directory of a warehouse URI, or None for an object store (``s3://``, ...)."""
    parsed = urlparse(warehouse)
    if parsed.scheme == "file":
        return Path(parsed.path).resolve()
    if parsed.scheme and len(parsed.scheme) > 1:
        return None
    return Path(warehouse).expanduser().resolve()


def catalog_conf(warehouse: str) -> dict[str, str]:
    """Spark settings for a persistent catalog kept inside a local warehouse.

    Spark's Hive catalog with an embedded Derby metastore, all under ``<warehouse>/_system/spark_catalog``:
    ``metastore_db/`` (Derby), ``warehouse/`` (``spark.sql.warehouse.dir``, for managed tables and
    database directories) and ``derby.log``. Every session built with these settings (``topiclake sql``,
    ``spark-sql``, a notebook) sees the same databases, tables and views. Embedded Derby admits one JVM
    at a time: a second session opening the same metastore fails until the first one stops.

    Creates the directory if needed.

    Args:
        warehouse: A local warehouse (path or ``file://`` URI).

    Raises:
        InvalidRequest: The warehouse is on an object store (Derby needs a local directory) or does not
            exist.
    """
    root = local_warehouse(warehouse)
    if root is None:
        raise InvalidRequest(
            f"a persistent local catalog needs a local warehouse, not {warehouse}: use an in-memory "
            "catalog, a Hive metastore service or Unity Catalog",
            warehouse=warehouse,
        )
    if not root.is_dir():
        raise InvalidRequest(f"no warehouse at {root}", warehouse=warehouse)
    home = root / CATALOG_DIR
    home.mkdir(parents=True, exist_ok=True)
    derby_log = str(home / "derby.log")
    if any(c.isspace() for c in derby_log):
        derby_log = f'"{derby_log}"'
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(home / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true"
        ),
        # Derby writes derby.log into the working directory unless told otherwise.
        _DRIVER_JAVA_OPTIONS: f"-Dderby.stream.error.file={derby_log}",
    }


def _check_catalog_free(warehouse: str) -> None:
    """Fail fast when another JVM has the warehouse's Derby metastore open.

    Derby holds an exclusive lock on ``metastore_db/dbex.lck`` while a JVM has the database booted;
    without this check a second session logs thousands of lines of retries before it fails.
    """
    root = local_warehouse(warehouse)
    if root is None:
        return
    lock_file = root / CATALOG_DIR / "metastore_db" / "dbex.lck"
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Windows
        return
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except OSError:
        return  # no metastore yet, or not ours to open: Derby will tell
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        raise StorageError(
            f"the persistent catalog {root / CATALOG_DIR} is open in another Spark process (embedded Derby "
            "admits one at a time: another topiclake sql, spark-sql or notebook?); stop that one, or use "
            "an in-memory catalog (topiclake sql --no-catalog)",
            uri=str(root / CATALOG_DIR),
        ) from exc
    finally:
        os.close(fd)  # also releases the lock if we got it


def spark_conf(
    master: str | None = None,
    app_name: str = "topiclake",
    *,
    warehouse: str | None = None,
    conf: Mapping[str, str] | None = None,
    catalog: bool = False,
) -> dict[str, str]:
    """Return the Spark configuration :func:`get_spark` applies (overrides in ``conf`` win).

    Args:
        master: Spark master URL; defaults to ``$TOPICLAKE_SPARK_MASTER`` or ``local[*]``.
        app_name: Application name shown by the cluster.
        warehouse: topiclake warehouse URI, exposed to jobs as ``spark.topiclake.warehouse``.
        conf: Extra or overriding settings (``spark.driver.extraJavaOptions`` is appended to, not replaced).
        catalog: Add :func:`catalog_conf` for ``warehouse``: the persistent local Hive catalog.

    Raises:
        InvalidRequest: ``catalog`` without a local ``warehouse``.
    """
    resolved_master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    settings: dict[str, str] = {
        "spark.master": resolved_master,
        "spark.app.name": app_name,
        # Delta (and S3A, when resolved) from the jar cache: offline, no Ivy resolution at startup.
        "spark.jars": ",".join(jar_paths() + s3a_jar_paths()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Without these, Python UDFs and Python data sources fail with
        # "Python worker failed to connect back" when another python is first on PATH.
        "spark.pyspark.python": _worker_python(),
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
        # an s3:// or s3a:// warehouse: S3A reaches its bucket with the AWS_* environment's endpoint and keys
        settings.update({f"spark.hadoop.{k}": v for k, v in s3a_settings(warehouse).items()})
    if catalog:
        if warehouse is None:
            raise InvalidRequest("a persistent catalog needs a warehouse")
        settings.update(catalog_conf(warehouse))
    overrides = dict(conf or {})
    if _DRIVER_JAVA_OPTIONS in settings and _DRIVER_JAVA_OPTIONS in overrides:
        overrides[_DRIVER_JAVA_OPTIONS] = (
            f"{settings[_DRIVER_JAVA_OPTIONS]} {overrides[_DRIVER_JAVA_OPTIONS]}"
        )
    settings.update(overrides)
    return settings


def _databricks_session(warehouse: str | None, conf: Mapping[str, str] | None) -> SparkSession:
    """On Databricks the runtime owns the session (Delta built in, no jar cache, no master to pick):
    reuse it and set only session-level settings (databricks/databricks.yml sets the same on the cluster).
    """
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    settings = dict(DELTA_RS_COMPATIBLE_CONF)
    if warehouse:
        settings[WAREHOUSE_CONF] = warehouse
    settings.update(conf or {})
    for key, value in settings.items():
        spark.conf.set(key, value)
    _register_topiclake(spark)
    logger.info("spark session of Databricks runtime %s", os.environ.get("DATABRICKS_RUNTIME_VERSION"))
    return spark


def get_spark(
    master: str | None = None,
    app_name: str = "topiclake",
    *,
    warehouse: str | None = None,
    conf: Mapping[str, str] | None = None,
    catalog: bool = False,
) -> SparkSession:
    """Build (or return the running) Spark session configured for Delta and topiclake.

    Works with ``local[*]`` and with a standalone cluster (``spark://host:7077``); the Delta jars come
    from the local cache filled once by ``python -m topiclake.sparkenv.jars resolve`` and are shipped to
    executors by Spark itself.

    Args:
        master: Spark master URL; defaults to ``$TOPICLAKE_SPARK_MASTER`` or ``local[*]``.
        app_name: Application name shown by the cluster.
        warehouse: topiclake warehouse URI, exposed to jobs as ``spark.topiclake.warehouse``.
        conf: Extra or overriding Spark settings (they win over the builder's).
        catalog: Use the persistent local catalog of ``warehouse`` (:func:`catalog_conf`): Spark's Hive
            catalog on an embedded Derby metastore. Off by default: an in-memory catalog. Only a new
            session gets it (catalog settings cannot change in a running JVM; a warning says so).

    Returns:
        The active session, with log level WARN and the ``topiclake`` data source registered when
        ``topiclake.spark.register`` exists.

    Raises:
        InvalidRequest: ``catalog`` for a warehouse that is missing or not local.
        StorageError: ``catalog`` while another process has the warehouse's Derby metastore open.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return _databricks_session(warehouse, conf)
    settings = spark_conf(master, app_name, warehouse=warehouse, conf=conf, catalog=catalog)
    if catalog and warehouse is not None and SparkContext._gateway is None:
        # no JVM of ours yet (after spark.stop() it lives on, and may hold the metastore itself)
        _check_catalog_free(warehouse)
    # The launcher reads the worker Python from the environment as well as from the conf.
    os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    # Block manager and RPC endpoints bind where the driver does, not to the host's first interface.
    os.environ.setdefault("SPARK_LOCAL_IP", settings["spark.driver.bindAddress"])
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if catalog and spark.conf.get("spark.sql.catalogImplementation", None) != "hive":
        logger.warning(
            "a Spark session without the persistent catalog was already running: its in-memory "
            "catalog is used (stop it before asking for catalog=True)"
        )
    if warehouse is not None:  # a running session got no spark.hadoop.* settings from the builder
        configure_s3a(spark, warehouse)
    _register_topiclake(spark)
    logger.info("spark session %s on %s", app_name, settings["spark.master"])
    return spark
