"""``topiclake sql``: Spark SQL over the warehouse, every topic a table of the database ``topiclake``.

Starts a Spark session (no gateway needed), registers the topics (``topiclake.spark.catalog``), runs the
statements and prints their results. pyspark is imported only when the command runs.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.cli._app import app, pairs
from topiclake.errors import InvalidRequest, SqlError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Settings of :func:`topiclake.sparkenv.session.spark_conf` that ``--print-conf`` leaves out: they belong to
#: the process that starts Spark, not to the catalog a second process should share.
_NOT_SHARED = ("spark.master", "spark.app.name", "spark.ui.")

#: Settings ``--print-conf`` leaves out unless ``--show-secrets``: printed flags end up in shell history,
#: terminal scrollback and the process list of the program they are passed to.
_SECRET = (".secret.key", ".session.token")


#: log4j2 configuration of the CLI's JVM: Spark's own logging at the chosen level, to stderr.
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
"""

_DERBY_HINT = (
    " -- the persistent catalog admits one Spark process at a time (embedded Derby): is another "
    "topiclake sql, spark-sql or notebook using this warehouse? Else use --no-catalog"
)


class SparkLogLevel(StrEnum):
    """Level of Spark's own log output on stderr."""

    off = "off"
    error = "error"
    warn = "warn"
    info = "info"
    debug = "debug"


class OutputFormat(StrEnum):
    """How result rows are printed."""

    table = "table"
    json = "json"
    csv = "csv"


def split_statements(text: str) -> list[str]:
    """Split SQL text at ``;`` outside quotes, backticks and comments; drop empty statements."""
    statements: list[str] = []
    current: list[str] = []
    has_code = False
    quote: str | None = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            current.append(c)
            if c == "\\" and quote != "`" and i + 1 < n:
                current.append(text[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        else:
            end = -1
        if end >= 0:  # a comment: kept, but it does not make a statement
            current.append(text[i:end])
            i = end
            continue
        if c == ";":
            if has_code:
                statements.append("".join(current).strip())
            current, has_code = [], False
        else:
            if c in "'\"`":
                quote = c
            has_code = has_code or not c.isspace()
            current.append(c)
        i += 1
    if has_code:
        statements.append("".join(current).strip())
    return statements


def _read_statements(query: str | None, file: str | None) -> list[str]:
    if (query is None) == (file is None):
        raise InvalidRequest("give the SQL as an argument or with --file, not both and not neither")
    if file is not None:
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text()
        except OSError as exc:
            raise InvalidRequest(f"cannot read {file}: {exc.strerror or exc}") from exc
    else:
        assert query is not None
        text = query
    statements = split_statements(text)
    if not statements:
        raise InvalidRequest("no SQL statement to run")
    return statements


def _spark_error(exc: BaseException, context: str) -> SqlError:
    """The first line of a Spark or JVM error, without the Java stack trace."""
    from topiclake.spark.catalog_sql import error_summary

    java = getattr(exc, "java_exception", None)
    first = error_summary(str(java if java is not None else exc)) or type(exc).__name__
    return SqlError(first if not context else f"{first} ({context})")


def _fetch(df: DataFrame, fmt: OutputFormat, max_rows: int) -> tuple[list[str], list[list[str | None]], bool]:
    """Column names, rows as text (JSON: one JSON object per row) and whether rows were left out."""
    from pyspark.sql import functions as F

    names = list(df.columns)
    safe = df.toDF(*[f"c{i}" for i in range(len(names))])  # duplicate or dotted names stay addressable
    if fmt is OutputFormat.json:
        fields = [F.col(f"c{i}").alias(name) for i, name in enumerate(names)]
        out = safe.select(F.to_json(F.struct(*fields), {"ignoreNullFields": "false"}))
    else:
        # Spark renders every value (timestamps in the session's time zone, UTC) as spark-sql does
        out = safe.select(*[F.col(f"c{i}").cast("string") for i in range(len(names))])
    rows = out.take(max_rows + 1) if max_rows > 0 else out.collect()
    truncated = max_rows > 0 and len(rows) > max_rows
    return names, [list(r) for r in rows[: max_rows or None]], truncated


def _print_table(names: list[str], rows: list[list[str | None]]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in names:
        table.add_column(Text(name), overflow="fold")
    for row in rows:
        table.add_row(*[Text("NULL", style="dim") if v is None else Text(v) for v in row])
    console = Console(highlight=False)
    if not console.is_terminal:  # piped: as wide as the rows, never wrapped
        console = Console(highlight=False, width=1_000_000)
    console.print(table)


def _print_csv(names: list[str], rows: list[list[str | None]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    typer.echo(buf.getvalue(), nl=False)


def _run(spark: SparkSession, statements: list[str], fmt: OutputFormat, max_rows: int) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from rich.console import Console

    status = Console(stderr=True)
    printed = 0
    for index, statement in enumerate(statements, 1):
        context = f"statement {index}" if len(statements) > 1 else ""
        try:
            with status.status(f"Running statement {index} of {len(statements)}"):
                df = spark.sql(statement)
                if not df.columns:  # DDL and other commands ran already and return nothing
                    continue
                names, rows, truncated = _fetch(df, fmt, max_rows)
        except (PySparkException, Py4JJavaError) as exc:
            raise _spark_error(exc, context) from exc
        if fmt is OutputFormat.json:
            for (line,) in rows:
                typer.echo(line)
        else:
            if printed:  # a blank line between result sets
                typer.echo("")
            if fmt is OutputFormat.csv:
                _print_csv(names, rows)
            else:
                _print_table(names, rows)
                typer.echo(f"({len(rows)} row{'' if len(rows) == 1 else 's'})", err=True)
        printed += 1
        if truncated:
            typer.echo(f"only the first {max_rows} rows are shown (--max-rows)", err=True)


@app.command("sql")
def sql(
    query: Annotated[
        str | None,
        typer.Argument(
            help="Spark SQL to run; several statements separated by ';'. Topics are tables of the "
            "current database `topiclake`.",
            show_default=False,
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file", "-f", help="Read the SQL from this file ('-': standard input).", show_default=False
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat,
        typer.Option("--format", help="Rows as a table, JSON lines or CSV.", envvar="TOPICLAKE_SQL_FORMAT"),
    ] = OutputFormat.table,
    warehouse: Annotated[
        str,
        typer.Option(help="Warehouse URI, as Spark reads it.", envvar="TOPICLAKE_WAREHOUSE"),
    ] = "./data",
    master: Annotated[
        str | None,
        typer.Option(
            help="Spark master URL (default local[*]).", envvar="TOPICLAKE_SPARK_MASTER", show_default=False
        ),
    ] = None,
    database: Annotated[
        str, typer.Option(help="Database that holds the topic tables.", envvar="TOPICLAKE_SQL_DATABASE")
    ] = "topiclake",
    catalog: Annotated[
        bool,
        typer.Option(
            "--catalog/--no-catalog",
            help="Keep the tables in the warehouse's persistent catalog (<warehouse>/_system/spark_catalog, "
            "shared with spark-sql and notebooks; one Spark process at a time) or in an in-memory one. "
            "Object-store warehouses always use an in-memory catalog.",
            envvar="TOPICLAKE_SQL_CATALOG",
        ),
    ] = True,
    conf: Annotated[
        list[str] | None,
        typer.Option(
            "--conf", help="Extra Spark setting KEY=VALUE (repeatable).", envvar="TOPICLAKE_SQL_CONF"
        ),
    ] = None,
    spark_log_level: Annotated[
        SparkLogLevel,
        typer.Option(help="Spark's own log output on stderr.", envvar="TOPICLAKE_SPARK_LOG_LEVEL"),
    ] = SparkLogLevel.off,
    max_rows: Annotated[
        int,
        typer.Option(
            help="Print at most this many rows per statement (0: all).",
            envvar="TOPICLAKE_SQL_MAX_ROWS",
            min=0,
        ),
    ] = 10_000,
    print_conf: Annotated[
        bool,
        typer.Option(
            "--print-conf",
            help="Print the --conf flags that give spark-sql, pyspark or spark-submit the same catalog "
            "and Delta setup, and exit (starts no Spark). An S3 secret key and session token are left out "
            "unless --show-secrets.",
        ),
    ] = False,
    show_secrets: Annotated[
        bool,
        typer.Option(
            "--show-secrets",
            help="With --print-conf: print the S3 secret key and session token too.",
        ),
    ] = False,
) -> None:
    """Run Spark SQL over the topics: `topiclake sql "SELECT count(*) FROM orders"`.

    Every topic is a table of the database `topiclake` (`orders.v1` is `topiclake.orders_v1`), next to
    `consumer_offsets` and the view `consumer_lag`; the catalog is refreshed at every start. Bad SQL
    exits 1 with Spark's message.
    """
    from topiclake.sparkenv.session import local_warehouse, spark_conf

    extra = pairs(conf, "--conf")
    local = local_warehouse(warehouse)
    warehouse = str(local) if local is not None else warehouse  # the same tables from any directory
    persistent = catalog and local is not None
    if print_conf:
        _print_conf(spark_conf(master, warehouse=warehouse, conf=extra, catalog=persistent), show_secrets)
        return
    statements = _read_statements(query, file)
    if local is None:  # a wrong endpoint, bucket or key: one line before Spark starts (AWS_* environment)
        from topiclake.platform import Storage

        Storage(warehouse).check_access()
    spark = _start(warehouse, master, database, persistent, extra, spark_log_level)
    _run(spark, statements, fmt, max_rows)


def _print_conf(settings: dict[str, str], show_secrets: bool) -> None:
    """The shareable settings as ``--conf`` flags on stdout; secrets only when asked for (else a note on
    stderr names what was left out)."""
    hidden = []
    for key, value in settings.items():
        if key.startswith(_NOT_SHARED):
            continue
        if key.endswith(_SECRET) and not show_secrets:
            hidden.append(key)
            continue
        typer.echo(f"--conf {key}={value}")
    if hidden:
        typer.echo(
            f"topiclake sql: left out {', '.join(hidden)}: add --show-secrets to print them (they then "
            "appear in shell history and the process list), or give them to Spark another way",
            err=True,
        )


def _start(
    warehouse: str,
    master: str | None,
    database: str,
    persistent: bool,
    extra: dict[str, str],
    log_level: SparkLogLevel,
) -> SparkSession:
    """A Spark session with the topics registered and ``database`` as the current database."""
    import os
    import tempfile

    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from rich.console import Console

    from topiclake.spark.catalog import register_tables
    from topiclake.sparkenv.session import get_spark

    if log_level is SparkLogLevel.off:
        # pyspark logs every analysis error once more, with the Java stack trace, as a JSON line on stderr
        from pyspark.logger import PySparkLogger

        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    status = Console(stderr=True)
    with tempfile.NamedTemporaryFile(
        "w", prefix="topiclake-sql-log4j2-", suffix=".properties", delete=False
    ) as log4j:
        log4j.write(_LOG4J2.format(level=log_level.value))
    java_options = f"-Dlog4j.configurationFile={log4j.name} -Dlog4j2.configurationFile={log4j.name}"
    if "spark.driver.extraJavaOptions" in extra:
        java_options = f"{java_options} {extra['spark.driver.extraJavaOptions']}"
    conf = {
        "spark.ui.showConsoleProgress": "false",
        **extra,
        "spark.driver.extraJavaOptions": java_options,
    }
    try:
        with status.status("Starting Spark"):
            spark = get_spark(master, "topiclake-sql", warehouse=warehouse, catalog=persistent, conf=conf)
            spark.sparkContext.setLogLevel(log_level.value.upper())
        with status.status("Registering topics"):
            register_tables(spark, warehouse, database)
            spark.sql("USE `" + database.replace("`", "``") + "`")
    except (PySparkException, Py4JJavaError) as exc:
        raise _spark_error(exc, "") from exc
    except SqlError as exc:
        if persistent and "SessionHiveMetaStoreClient" in exc.message:
            raise SqlError(exc.message + _DERBY_HINT) from exc
        raise
    finally:
        os.unlink(log4j.name)  # read once, when the JVM started
    return spark
