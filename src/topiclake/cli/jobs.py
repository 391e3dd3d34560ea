"""``topiclake jobs``: the Spark maintenance and reprocessing jobs (compact, retention, compact-keys,
vacuum, reprocess) run in this process with a local or remote Spark master.

Each command builds the same config as ``python -m topiclake.jobs.<job>`` and calls the job's ``run``
with a rich progress bar on stderr; the one-line summary (or ``--json``) goes to stdout. Topics, partitions
and the transformation are checked before Spark starts, so a typo fails in a second, not after the JVM.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from topiclake.cli._app import app, configure_logging, parse_timestamp

if TYPE_CHECKING:
    from rich.progress import Progress as RichBar

    from topiclake.jobs.common import JobConfig, JobResult, Progress

#: As ``topiclake.jobs.common.DEFAULT_WAREHOUSE`` (the jobs package is imported only when a job runs).
DEFAULT_WAREHOUSE = "./data"

jobs_app = typer.Typer(
    help="Spark jobs on topic tables: compaction, retention, key compaction, VACUUM and reprocessing "
    "(safe while the gateway produces and consumers read).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(jobs_app, name="jobs")

Warehouse = Annotated[
    str,
    typer.Option(
        "--warehouse",
        envvar="TOPICLAKE_WAREHOUSE",
        help="Warehouse URI: a local directory, s3://, gs://, ...",
    ),
]
Topics = Annotated[
    list[str],
    typer.Option("--topic", envvar="TOPICLAKE_JOBS_TOPIC", help="Topic to work on (repeatable)."),
]
Master = Annotated[
    str | None,
    typer.Option(
        "--master",
        envvar="TOPICLAKE_SPARK_MASTER",
        help="Spark master URL (default local[*]).",
        show_default=False,
    ),
]
StorageOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        envvar="TOPICLAKE_JOBS_STORAGE_OPTION",
        help="Object-store option KEY=VALUE for the warehouse (repeatable).",
    ),
]
Partitions = Annotated[
    list[int] | None,
    typer.Option(
        "--partition", envvar="TOPICLAKE_JOBS_PARTITION", min=0, help="Only this partition (repeatable)."
    ),
]
NowMs = Annotated[
    int | None,
    typer.Option(
        "--now-ms",
        envvar="TOPICLAKE_JOBS_NOW_MS",
        min=0,
        help="The clock in ms since the epoch (default now).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", envvar="TOPICLAKE_JOBS_JSON", help="The result as JSON.")]
LogLevel = Annotated[
    str,
    typer.Option("--log-level", envvar="TOPICLAKE_LOG_LEVEL", help="debug, info, warning or error."),
]


class _Bar:
    """The jobs' :class:`~topiclake.jobs.common.Progress` as a rich progress bar."""

    def __init__(self, bar: RichBar) -> None:
        self._bar = bar
        self._task: Any = None
        self._description = ""

    def start(self, description: str, total: int) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[-1].total)
        self._description = description
        self._task = self._bar.add_task(description, total=total)

    def advance(self, note: str | None = None) -> None:
        if self._task is None:
            return
        text = f"{self._description}: {note}" if note else self._description
        self._bar.update(self._task, advance=1, description=text)


@contextmanager
def _progress() -> Iterator[Progress]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as bar:
        yield _Bar(bar)


def _run(
    name: str,
    config: JobConfig,
    run: Callable[[Any, Any, Progress | None], JobResult],
    as_json: bool,
    log_level: str,
) -> None:
    from rich.console import Console

    from topiclake.jobs.common import start_spark

    configure_logging(log_level)
    config.check()  # unknown topics, partitions, transformations: before the JVM starts

    with Console(stderr=True).status(f"starting Spark for {name} ..."):
        spark, created = start_spark(name, config, conf={"spark.ui.showConsoleProgress": "false"})
    try:
        with _progress() as progress:
            result = run(spark, config, progress)
    finally:
        if created:
            spark.stop()
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        typer.echo(result.summary())


def _common(
    warehouse: str, topic: list[str], master: str | None, storage_option: list[str] | None
) -> dict[str, Any]:
    from topiclake.jobs.common import parse_pairs

    return {
        "warehouse": warehouse,
        "topics": tuple(dict.fromkeys(topic)),
        "master": master,
        "storage_options": parse_pairs(storage_option),
    }


@jobs_app.command("compact")
def jobs_compact(
    topic: Topics,
    partition: Partitions = None,
    target_file_bytes: Annotated[
        int,
        typer.Option(
            "--target-file-bytes",
            envvar="TOPICLAKE_JOBS_TARGET_FILE_BYTES",
            min=1,
            help="Size of files written.",
        ),
    ] = 64 * 1024 * 1024,
    min_files: Annotated[
        int,
        typer.Option(
            "--min-files",
            envvar="TOPICLAKE_JOBS_MIN_FILES",
            min=1,
            help="Compact a segment only when it has at least this many files.",
        ),
    ] = 2,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    master: Master = None,
    storage_option: StorageOptions = None,
    as_json: AsJson = False,
    log_level: LogLevel = "warning",
) -> None:
    """Rewrite each segment's small files into few large files sorted by offset (no data change)."""
    from topiclake.jobs import compact

    config = compact.CompactConfig(
        **_common(warehouse, topic, master, storage_option),
        partitions=tuple(sorted(set(partition or ()))),
        target_file_bytes=target_file_bytes,
        min_files=min_files,
    )
    _run("compact", config, compact.run, as_json, log_level)


@jobs_app.command("retention")
def jobs_retention(
    topic: Topics,
    now_ms: NowMs = None,
    vacuum_retention_hours: Annotated[
        int,
        typer.Option(
            "--vacuum-retention-hours",
            envvar="TOPICLAKE_JOBS_VACUUM_RETENTION_HOURS",
            min=0,
            help="VACUUM files unreferenced for this many hours (at least 1).",
        ),
    ] = 1,
    no_vacuum: Annotated[
        bool,
        typer.Option("--no-vacuum", envvar="TOPICLAKE_JOBS_NO_VACUUM", help="Do not VACUUM or trim the log."),
    ] = False,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    master: Master = None,
    storage_option: StorageOptions = None,
    as_json: AsJson = False,
    log_level: LogLevel = "warning",
) -> None:
    """Delete old sealed segments by retention.ms and retention.bytes (Kafka's rules), then VACUUM."""
    from topiclake.jobs import retention

    config = retention.RetentionConfig(
        **_common(warehouse, topic, master, storage_option),
        now_ms=now_ms,
        vacuum=not no_vacuum,
        vacuum_retention_hours=vacuum_retention_hours,
    )
    _run("retention", config, retention.run, as_json, log_level)


@jobs_app.command("compact-keys")
def jobs_compact_keys(
    topic: Topics,
    now_ms: NowMs = None,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    master: Master = None,
    storage_option: StorageOptions = None,
    as_json: AsJson = False,
    log_level: LogLevel = "warning",
) -> None:
    """Keep the latest record per key of cleanup.policy=compact topics (Kafka's log cleaner)."""
    from topiclake.jobs import compact_keys

    config = compact_keys.CompactKeysConfig(
        **_common(warehouse, topic, master, storage_option), now_ms=now_ms
    )
    _run("compact-keys", config, compact_keys.run, as_json, log_level)


@jobs_app.command("vacuum")
def jobs_vacuum(
    topic: Topics,
    retention_hours: Annotated[
        int,
        typer.Option(
            "--retention-hours",
            envvar="TOPICLAKE_JOBS_RETENTION_HOURS",
            min=0,
            help="Keep files unreferenced for less than this many hours (at least 1).",
        ),
    ] = 1,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    master: Master = None,
    storage_option: StorageOptions = None,
    as_json: AsJson = False,
    log_level: LogLevel = "warning",
) -> None:
    """VACUUM unreferenced data files, write a checkpoint and trim the Delta log."""
    from topiclake.jobs import vacuum

    config = vacuum.VacuumConfig(
        **_common(warehouse, topic, master, storage_option), retention_hours=retention_hours
    )
    _run("vacuum", config, vacuum.run, as_json, log_level)


def _time(value: str | None, option: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except typer.BadParameter as exc:
        raise typer.BadParameter(exc.message, param_hint=option) from exc


@jobs_app.command("reprocess")
def jobs_reprocess(
    topic: Topics,
    job_id: Annotated[
        str,
        typer.Option(
            "--job-id",
            envvar="TOPICLAKE_JOBS_JOB_ID",
            help="Names the run: a re-run with this id writes nothing.",
        ),
    ],
    transform: Annotated[
        str | None,
        typer.Option(
            "--transform",
            envvar="TOPICLAKE_JOBS_TRANSFORM",
            help="MODULE:FUNCTION, a DataFrame -> DataFrame function (default: copy).",
        ),
    ] = None,
    to_topic: Annotated[
        str | None, typer.Option("--to-topic", envvar="TOPICLAKE_JOBS_TO_TOPIC", help="Append to this topic.")
    ] = None,
    to_table: Annotated[
        str | None,
        typer.Option(
            "--to-table", envvar="TOPICLAKE_JOBS_TO_TABLE", help="Append to this Delta table (URI)."
        ),
    ] = None,
    partition: Partitions = None,
    from_offset: Annotated[
        int | None,
        typer.Option("--from-offset", envvar="TOPICLAKE_JOBS_FROM_OFFSET", min=0, help="First offset."),
    ] = None,
    to_offset: Annotated[
        int | None,
        typer.Option(
            "--to-offset",
            envvar="TOPICLAKE_JOBS_TO_OFFSET",
            min=0,
            help="Stop before this offset (default: end).",
        ),
    ] = None,
    from_timestamp: Annotated[
        str | None,
        typer.Option(
            "--from-timestamp",
            envvar="TOPICLAKE_JOBS_FROM_TIMESTAMP",
            help="From the first record at or after this time (ms or ISO 8601).",
        ),
    ] = None,
    to_timestamp: Annotated[
        str | None,
        typer.Option(
            "--to-timestamp",
            envvar="TOPICLAKE_JOBS_TO_TIMESTAMP",
            help="Until before the first record at or after this time (ms or ISO 8601).",
        ),
    ] = None,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    master: Master = None,
    storage_option: StorageOptions = None,
    as_json: AsJson = False,
    log_level: LogLevel = "warning",
) -> None:
    """Replay a topic range through a transformation into a topic or a Delta table, exactly once."""
    from topiclake.jobs import reprocess

    config = reprocess.ReprocessConfig(
        **_common(warehouse, topic, master, storage_option),
        job_id=job_id,
        transform=transform,
        to_topic=to_topic,
        to_table=to_table,
        partitions=tuple(sorted(set(partition or ()))),
        from_offset=from_offset,
        to_offset=to_offset,
        from_timestamp=_time(from_timestamp, "--from-timestamp"),
        to_timestamp=_time(to_timestamp, "--to-timestamp"),
    )
    _run("reprocess", config, reprocess.run, as_json, log_level)
