"""``topiclake produce``: the lines of stdin as records."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from topiclake.cli._app import (
    DEFAULT_URL,
    Acks,
    BootstrapServer,
    Encoding,
    Timeout,
    Url,
    app,
    client,
    pairs,
    unescape,
)
from topiclake.errors import InvalidRecord

if TYPE_CHECKING:
    from topiclake.client import Acks as ClientAcks
    from topiclake.client import TopiclakeClient

# ---------------------------------------------------------------------------------------------- produce


def _stdout_is_tty() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


def _line_record(
    line: bytes, separator: bytes | None, encoding: Encoding, headers: dict[str, str]
) -> dict[str, object]:
    """One stdin line as a record of the JSON body; raises InvalidRecord for a line that cannot be one."""
    import orjson

    key: bytes | None = None
    value = line
    if separator is not None:
        k, sep, v = line.partition(separator)
        if sep:
            key, value = k, v

    def field(data: bytes, what: str) -> object:
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise InvalidRecord(f"{what} is not UTF-8; use --encoding binary with base64 lines") from exc
        if encoding is Encoding.json:
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise InvalidRecord(f"{what} is not JSON: {exc}") from exc
        return text

    record: dict[str, object] = {"value": field(value, "value")}
    if key is not None:
        record["key"] = field(key, "key")
    if headers:
        record["headers"] = headers
    return record


@app.command()
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to produce to.")],
    key_separator: Annotated[
        str | None,
        typer.Option(
            "--key-separator",
            "-K",
            help="Split each line at the first SEP into key and value (\\t for a tab); lines without it "
            "have no key.",
            envvar="TOPICLAKE_PRODUCE_KEY_SEPARATOR",
        ),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition",
            "-p",
            help="Partition (default: by key, else spread).",
            envvar="TOPICLAKE_PRODUCE_PARTITION",
        ),
    ] = None,
    acks: Annotated[
        Acks,
        typer.Option(
            help="all: after the Delta commit; 1: once accepted; 0: at once.", envvar="TOPICLAKE_PRODUCE_ACKS"
        ),
    ] = Acks.all,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="A header k=v on every record (repeatable).",
            envvar="TOPICLAKE_PRODUCE_HEADER",
        ),
    ] = None,
    encoding: Annotated[
        Encoding,
        typer.Option(
            help="Lines are UTF-8 text (string), JSON values (json) or base64 (binary).",
            envvar="TOPICLAKE_PRODUCE_ENCODING",
        ),
    ] = Encoding.string,
    batch_size: Annotated[
        int, typer.Option(help="Lines per request.", envvar="TOPICLAKE_PRODUCE_BATCH_SIZE", min=1)
    ] = 500,
    idempotent: Annotated[
        bool | None,
        typer.Option(
            "--idempotent/--no-idempotent",
            help="Idempotent producer: retries after a dead broker or a lost answer never write a record "
            "twice (needs --acks all). Default: on with --bootstrap-server and --acks all, off with --url.",
            envvar="TOPICLAKE_PRODUCE_IDEMPOTENT",
            show_default=False,
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Produce the lines of stdin as records, one per line (empty lines are skipped).

    Per-record errors go to stderr as `line N: code: message`, a summary line at the end; the exit status
    is 1 when any record failed.
    """
    separator = unescape(key_separator).encode() if key_separator else None
    headers = pairs(header, "--header")
    started = time.perf_counter()
    sent = failed = 0
    interrupted = False
    progress: Progress | None = None
    task: TaskID | None = None

    def warn(message: str) -> None:
        if progress is not None:
            progress.console.print(message, markup=False, highlight=False)
        else:
            typer.echo(message, err=True)

    def send(tl: TopiclakeClient, batch: list[dict[str, object]], lines: list[int]) -> None:
        nonlocal sent, failed
        response = tl.produce(
            topic, batch, acks=cast("ClientAcks", acks.value), partition=partition, encoding=encoding.value
        )
        for n, res in zip(lines, response["results"], strict=False):
            error = res["error"]
            if error is None:
                sent += 1
            else:
                failed += 1
                warn(f"line {n}: {error['code']}: {error['message']}")

    with ExitStack() as stack:
        if idempotent and not bootstrap_server:
            bootstrap_server = url  # the one gateway as a cluster of one: same retries, same sequences
        tl = stack.enter_context(client(url, timeout, bootstrap_server, idempotent=idempotent))
        batch: list[dict[str, object]] = []
        lines: list[int] = []
        try:
            for n, raw in enumerate(sys.stdin.buffer, start=1):
                line = raw.rstrip(b"\n").removesuffix(b"\r")
                if not line:
                    continue
                try:
                    batch.append(_line_record(line, separator, encoding, headers))
                    lines.append(n)
                except InvalidRecord as exc:
                    failed += 1
                    warn(f"line {n}: {exc.code}: {exc.message}")
                if len(batch) >= batch_size:
                    send(tl, batch, lines)
                    batch, lines = [], []
                    if progress is None and _stdout_is_tty():
                        progress = stack.enter_context(
                            Progress(
                                SpinnerColumn(),
                                TextColumn(
                                    "producing to {task.fields[topic]}: {task.completed:,.0f} records"
                                ),
                                TimeElapsedColumn(),
                                console=Console(stderr=True),
                                transient=True,
                            )
                        )
                        task = progress.add_task("produce", total=None, topic=topic)
                    if progress is not None and task is not None:
                        progress.update(task, completed=sent + failed)
            if batch:
                send(tl, batch, lines)
        except KeyboardInterrupt:
            interrupted = True  # lines read but not sent yet are dropped
        finally:
            if progress is not None:
                progress.stop()
            seconds = time.perf_counter() - started
            rate = sent / seconds if seconds > 0 else 0.0
            typer.echo(
                f"produced {sent:,} records to {topic} ({failed:,} failed) in {seconds:.2f} s, "
                f"{rate:,.0f} records/s",
                err=True,
            )
    if interrupted:
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(1)
