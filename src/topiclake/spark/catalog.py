"""Topics as tables of a Spark catalog: SQL over the same Delta tables the gateway appends to.

:func:`register_tables` puts into one database (``topiclake`` by default):

- one table per topic, named by :func:`table_name` (``orders.v1`` -> ``topiclake.orders_v1``), an
  external Delta table at ``<warehouse>/topics/<topic>``;
- ``consumer_offsets``: the committed offsets of consumer groups (``<warehouse>/_system/consumer_offsets``);
- ``partition_offsets``: a view with both ends of every partition's log (``log_start_offset``,
  ``end_offset``), exact also once retention emptied a partition (``topiclake.spark._ends_sql``);
- ``consumer_lag``: a view with the lag of every group per partition (end offset - committed offset);
- ``<table>_typed``: for a topic whose values have a registered schema, a view with the record's fields as
  columns (:mod:`topiclake.spark.typed_views`).

Registering only writes the catalog: ``CREATE TABLE ... USING delta LOCATION`` on an existing Delta table
adopts its schema and commits nothing to it, so the gateway (delta-rs) keeps appending. Delta on Spark
reads the newest snapshot for every query, so a record acknowledged with ``acks=all`` is in the next one.

Which catalog keeps the tables is the session's business: the persistent local Hive catalog of
``topiclake.sparkenv.session.catalog_conf`` (``topiclake sql`` uses it), an in-memory one, or Unity Catalog on
Databricks (``--catalog``). ``python -m topiclake.spark.catalog --warehouse URI`` registers from the
command line (see :func:`parser`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from topiclake.errors import InvalidRequest, SqlError, TopiclakeError
from topiclake.platform.catalog import CATALOG_TABLE
from topiclake.schemas.offsets import OFFSETS_TABLE
from topiclake.schemas.partition_offsets import PARTITION_OFFSETS_TABLE
from topiclake.spark._delta_read import first_line as _first_line
from topiclake.spark._delta_read import read_delta as _read_delta
from topiclake.spark._ends_sql import ENDS_VIEW, HISTORY_VIEW, ends_view_sql, history_view_sql
from topiclake.spark.catalog_sql import (
    assign_names,
    ident,
    lag_view_sql,
    literal,
    same_location,
    table_name,
)
from topiclake.spark.typed_views import register_typed_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DATABASE",
    "LAG_VIEW",
    "OFFSETS_NAME",
    "Registration",
    "main",
    "parser",
    "register_tables",
    "table_name",
]

logger = logging.getLogger(__name__)

#: The database (schema) that holds the topics.
DATABASE = "topiclake"
#: Name of the committed-offsets table in that database.
OFFSETS_NAME = "consumer_offsets"
#: Name of the lag view in that database.
LAG_VIEW = "consumer_lag"

_RESERVED = frozenset({OFFSETS_NAME, LAG_VIEW, ENDS_VIEW, HISTORY_VIEW})


@dataclass(frozen=True)
class Registration:
    """What :func:`register_tables` left in the catalog.

    Attributes:
        database: The database, qualified by its catalog when one was given (``main.topiclake``).
        tables: Topic name -> qualified table name, for every topic that has a table now.
        created: Tables this call created (new topics, or tables that pointed elsewhere).
        dropped: Tables this call removed (deleted topics, or tables that pointed elsewhere).
        skipped: Topic name -> why it has no table (a name collision, a table not written yet).
        consumer_offsets: Whether ``consumer_offsets`` is registered (no group committed yet: it is not,
            and ``consumer_lag`` is an empty view).
        typed_views: Topic name -> qualified name of its typed view (topics with a value schema).
    """

    database: str
    tables: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    consumer_offsets: bool = False
    typed_views: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Existing:
    name: str
    kind: str  # EXTERNAL, MANAGED, VIEW
    location: str | None


def _root(warehouse: str) -> str:
    """The warehouse URI as Spark should see it: an absolute path for a local warehouse."""
    from topiclake.sparkenv.session import local_warehouse

    local = local_warehouse(warehouse)
    if local is None:
        return warehouse.rstrip("/")
    if not local.is_dir():
        raise InvalidRequest(f"no warehouse at {local}", warehouse=warehouse)
    return str(local)


def _topic_ids(spark: SparkSession, root: str) -> dict[str, str]:
    """``topic_id`` of every topic's newest row in ``_system/topics`` (deleted ones too: harmless)."""
    df = _read_delta(spark, f"{root}/_system/{CATALOG_TABLE}")
    if df is None:
        return {}
    latest: dict[str, tuple[int, str]] = {}
    for row in df.select("name", "revision", "topic_id").collect():
        name, revision = str(row["name"]), int(row["revision"])
        if name not in latest or revision > latest[name][0]:
            latest[name] = (revision, str(row["topic_id"]))
    return {name: tid for name, (_, tid) in latest.items()}


def _known_ends(root: str, topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """Both ends of every partition of ``topics``, read with delta-rs (the high watermark is a ``txn``
    action SQL cannot see), for a local warehouse; {} elsewhere (the recorded ends still count)."""
    from topiclake.platform.catalog import TopicCatalog
    from topiclake.platform.log.partition_offsets import partition_ends
    from topiclake.platform.log.topic_log import partition_app_id
    from topiclake.platform.storage import Storage
    from topiclake.sparkenv.session import local_warehouse

    if not topics or local_warehouse(root) is None:
        return {}
    storage = Storage(root)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        catalog = TopicCatalog(storage)
        for topic in topics:
            for p, ends in partition_ends(storage, catalog.get(topic), partition_app_id).items():
                out[(topic, p)] = ends
    except TopiclakeError as exc:
        logger.warning("partition ends not read from the tables (%s): only the recorded ones", exc.message)
    return out


def _live_topics(spark: SparkSession, root: str) -> list[str]:
    """Topic names of the warehouse: the newest row per name of ``_system/topics`` that is not deleted."""
    df = _read_delta(spark, f"{root}/_system/{CATALOG_TABLE}")
    if df is None:
        return []
    # one row per change of a topic: small, so collected as it is (no shuffle)
    latest: dict[str, tuple[int, bool]] = {}
    for row in df.select("name", "revision", "deleted").collect():
        name, revision = str(row["name"]), int(row["revision"])
        if name not in latest or revision > latest[name][0]:
            latest[name] = (revision, bool(row["deleted"]))
    return sorted(name for name, (_, deleted) in latest.items() if not deleted)


def _existing(spark: SparkSession, database: str) -> dict[str, _Existing]:
    """Tables and views of the database with their type and location (one catalog call, no table read)."""
    out: dict[str, _Existing] = {}
    for row in spark.sql(f"SHOW TABLE EXTENDED IN {database} LIKE '*'").collect():
        if row["isTemporary"]:
            continue
        info: dict[str, str] = {}
        for line in (row["information"] or "").splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                info[key.strip()] = value.strip()
        name = str(row["tableName"]).lower()
        out[name] = _Existing(name, info.get("Type", "").upper(), info.get("Location"))
    return out


def register_tables(
    spark: SparkSession,
    warehouse: str,
    database: str = DATABASE,
    *,
    catalog: str | None = None,
) -> Registration:
    """Make the catalog's ``database`` hold exactly the warehouse's topics, offsets table and lag view.

    Idempotent: tables of deleted topics (and any other external table in the database) are dropped -- a
    dropped external table keeps its data --, new topics get a table, tables that already point at their
    topic are left alone. Managed tables and views other than ``consumer_lag`` are never touched, and
    nothing is committed to any Delta table.

    A topic whose :func:`table_name` collides with another topic's (``a.b`` and ``a_b``; ``Orders`` and
    ``orders``) gets a table only if its own name is the table name; the others are skipped with a
    warning and can still be read as ``delta.`<warehouse>/topics/<topic>```.

    Args:
        spark: The session whose catalog receives the tables.
        warehouse: The warehouse URI as Spark reads it (local path, ``file://``, ``s3a://``, ``abfss://``).
        database: The database (schema) to fill; created if missing.
        catalog: A catalog name (Unity Catalog on Databricks); None: the session's current catalog.

    Returns:
        What was registered, created, dropped and skipped.

    Raises:
        InvalidRequest: A local warehouse directory does not exist.
        SqlError: Spark refused a statement (for example no permission to create the schema).
    """
    from pyspark.errors import PySparkException

    root = _root(warehouse)
    db = ident(catalog, database) if catalog else ident(database)

    def run(statement: str) -> None:
        logger.debug("sql: %s", statement)
        try:
            spark.sql(statement)
        except PySparkException as exc:
            raise SqlError(f"{_first_line(exc)} (in: {statement.splitlines()[0]})") from exc

    if not spark.catalog.databaseExists(f"{catalog}.{database}" if catalog else database):
        run(f"CREATE SCHEMA IF NOT EXISTS {db}")
    names, skipped = assign_names(_live_topics(spark, root), _RESERVED)
    offsets_uri = f"{root}/_system/{OFFSETS_TABLE}"
    has_offsets = _read_delta(spark, offsets_uri) is not None
    result = Registration(
        database=f"{catalog}.{database}" if catalog else database,
        skipped=skipped,
        consumer_offsets=has_offsets,
    )
    wanted = {name: f"{root}/topics/{topic}" for topic, name in names.items()}
    if has_offsets:
        wanted[OFFSETS_NAME] = offsets_uri

    existing = _existing(spark, db)
    for name, obj in sorted(existing.items()):
        stale = name not in wanted or not same_location(obj.location, wanted[name])
        if obj.kind == "EXTERNAL" and stale:
            run(f"DROP TABLE IF EXISTS {db}.{ident(name)}")
            result.dropped.append(name)
            logger.info("dropped table %s.%s (was at %s)", result.database, name, obj.location)
            del existing[name]

    by_name = {name: topic for topic, name in names.items()}
    for name, uri in sorted(wanted.items()):
        topic = by_name.get(name)
        if name in existing:
            obj = existing[name]
            if obj.kind != "EXTERNAL":
                reason = f"{result.database}.{name} exists already as a {obj.kind.lower()} table or view"
                if topic is None:
                    raise SqlError(reason)
                result.skipped[topic] = reason
                continue
        else:
            try:
                spark.sql(
                    f"CREATE TABLE IF NOT EXISTS {db}.{ident(name)} USING delta LOCATION {literal(uri)}"
                )
            except PySparkException as exc:
                if topic is None:
                    raise SqlError(f"cannot register {uri}: {_first_line(exc)}") from exc
                # e.g. a topic created a moment ago whose table is not written yet
                result.skipped[topic] = f"cannot register {uri}: {_first_line(exc)}"
                continue
            result.created.append(name)
            logger.info("registered table %s.%s at %s", result.database, name, uri)
        if topic is not None:
            result.tables[topic] = f"{result.database}.{name}"

    registered = {t: f"{db}.{ident(names[t])}" for t in result.tables}
    offsets_table = f"{db}.{ident(OFFSETS_NAME)}" if has_offsets else None
    for view in (ENDS_VIEW, HISTORY_VIEW, LAG_VIEW):
        old = existing.get(view)
        if old is not None and old.kind != "VIEW":
            raise SqlError(f"{result.database}.{view} exists already as a table")
    recorded_uri = f"{root}/_system/{PARTITION_OFFSETS_TABLE}"
    recorded = f"delta.{ident(recorded_uri)}" if _read_delta(spark, recorded_uri) is not None else None
    ids = _topic_ids(spark, root)
    ends = ends_view_sql(registered, recorded, ids, _known_ends(root, sorted(result.tables)))
    run(f"CREATE OR REPLACE VIEW {db}.{ident(ENDS_VIEW)} AS\n{ends}")
    if recorded is not None:
        history = history_view_sql(registered, recorded, ids)
        run(f"CREATE OR REPLACE VIEW {db}.{ident(HISTORY_VIEW)} AS\n{history}")
    elif HISTORY_VIEW in existing:  # e.g. left by another warehouse's registration
        run(f"DROP VIEW IF EXISTS {db}.{ident(HISTORY_VIEW)}")
    lag = lag_view_sql(registered, offsets_table, f"{db}.{ident(ENDS_VIEW)}")
    run(f"CREATE OR REPLACE VIEW {db}.{ident(LAG_VIEW)} AS\n{lag}")
    typed, _untyped = register_typed_views(spark, root, db, {t: names[t] for t in result.tables})
    result.typed_views.update({t: f"{result.database}.{v}" for t, v in typed.items()})

    for topic, reason in sorted(result.skipped.items()):
        logger.warning("topic %s has no table in %s: %s", topic, result.database, reason)
    logger.info(
        "registered %d topic tables in %s (%d created, %d dropped, %d skipped)",
        len(result.tables),
        result.database,
        len(result.created),
        len(result.dropped),
        len(result.skipped),
    )
    return result


# ---------------------------------------------------------------------------------------------- entry point


def parser() -> argparse.ArgumentParser:
    """Arguments of ``python -m topiclake.spark.catalog`` (also a Databricks task's parameters)."""
    p = argparse.ArgumentParser(
        prog="python -m topiclake.spark.catalog",
        description="Register every topic of a warehouse as a table (and the consumer offsets table and "
        "the consumer_lag view) in a Spark catalog.",
    )
    p.add_argument(
        "--warehouse",
        default=os.environ.get("TOPICLAKE_WAREHOUSE", "./data"),
        help="Warehouse URI as Spark reads it (default $TOPICLAKE_WAREHOUSE, else ./data).",
    )
    p.add_argument(
        "--catalog", default=None, help="Catalog to register into (Unity Catalog); default: current."
    )
    p.add_argument(
        "--database",
        "--schema",
        dest="database",
        default=DATABASE,
        help=f"Database (schema) that receives the tables (default {DATABASE}).",
    )
    p.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default $TOPICLAKE_SPARK_MASTER, else local[*]; a running session keeps "
        "its own).",
    )
    p.add_argument(
        "--local-catalog",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Use the warehouse's persistent local catalog (Hive metastore on Derby under "
        "<warehouse>/_system/spark_catalog). Default: yes for a local warehouse when no --catalog is given "
        "and no Spark session is running in this process (on Databricks one always is).",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Register the tables, print one summary line; 0 on success, 1 with ``ClassName: message`` on error."""
    from pyspark.sql import SparkSession

    from topiclake.errors import TopiclakeError
    from topiclake.process import owns_process, run_and_exit
    from topiclake.sparkenv.session import get_spark, local_warehouse

    if argv is None and owns_process():  # a process of its own: its code, every time (delta-rs#2184)
        run_and_exit(lambda: main(sys.argv[1:]))
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = local_warehouse(args.warehouse)
    warehouse = str(path) if path is not None else args.warehouse
    running = SparkSession.getActiveSession() is not None
    local = args.local_catalog
    if local is None:
        local = args.catalog is None and not running and path is not None
    try:
        spark = get_spark(
            args.master,
            "topiclake-register-tables",
            warehouse=warehouse,
            catalog=local,
            # a core setting: only a session this process starts takes it (Databricks refuses to set it)
            conf=None if running else {"spark.ui.showConsoleProgress": "false"},
        )
        result = register_tables(spark, warehouse, args.database, catalog=args.catalog)
    except TopiclakeError as exc:
        print(f"{type(exc).__name__}: {exc.message}", file=sys.stderr)
        return 1
    print(
        f"registered {len(result.tables)} topics in {result.database} "
        f"(created {len(result.created)}, dropped {len(result.dropped)}, skipped {len(result.skipped)}; "
        f"consumer_offsets: {'yes' if result.consumer_offsets else 'not yet'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
