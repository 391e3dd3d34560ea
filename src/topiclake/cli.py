"""``topiclake``: the command line. Every option can also come from the environment (``TOPICLAKE_*``)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import sys
import threading
import time
from contextlib import ExitStack
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

import topiclake
from topiclake.errors import (
    InvalidRecord,
    InvalidRequest,
    PartitionNotFound,
    TopicExists,
    TopiclakeError,
    TopicNotFound,
)

if TYPE_CHECKING:
    from topiclake.client import Acks as ClientAcks
    from topiclake.client import FetchedRecord, TopiclakeClient

app = typer.Typer(
    name="topiclake",
    help=(
        "topiclake: Kafka-style topics whose partitions are Delta Lake tables.\n\n"
        "Producers and consumers use HTTP; Spark and SQL read the same tables. "
        "Start with `topiclake serve`, then open http://127.0.0.1:8082/docs."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@app.command()
def serve(
    warehouse: Annotated[
        str | None,
        typer.Option(
            help="Warehouse URI: a local directory (default ./data), s3://, gs://, abfss://.",
            envvar="TOPICLAKE_WAREHOUSE",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default 127.0.0.1).", envvar="TOPICLAKE_HOST")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default 8082).", envvar="TOPICLAKE_PORT")
    ] = None,
    broker_id: Annotated[
        int | None, typer.Option(help="This broker's id (default 0).", envvar="TOPICLAKE_BROKER__BROKER_ID")
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="debug, info, warning or error (default info).", envvar="TOPICLAKE_LOG_LEVEL"),
    ] = None,
) -> None:
    """Run the gateway: one broker serving the HTTP API over the warehouse."""
    import uvicorn

    from topiclake.api import create_app
    from topiclake.settings import GatewaySettings

    overrides: dict[str, object] = {
        k: v
        for k, v in {"warehouse": warehouse, "host": host, "port": port, "log_level": log_level}.items()
        if v is not None
    }
    settings = GatewaySettings(**overrides)  # type: ignore[arg-type]
    if broker_id is not None:
        settings = settings.model_copy(
            update={"broker": settings.broker.model_copy(update={"broker_id": broker_id})}
        )
    _configure_logging(settings.log_level)
    logging.getLogger(__name__).info(
        "serving warehouse %s on http://%s:%d (docs at /docs)",
        settings.warehouse,
        settings.host,
        settings.port,
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)


@app.command()
def version() -> None:
    """Print the topiclake version."""
    typer.echo(topiclake.__version__)


# ---------------------------------------------------------------------------------------------- clients

Url = Annotated[
    str,
    typer.Option("--url", envvar="TOPICLAKE_URL", help="Base URL of the gateway (`topiclake serve`)."),
]
Timeout = Annotated[
    float, typer.Option("--timeout", envvar="TOPICLAKE_TIMEOUT", help="Seconds to wait for each answer.")
]
DEFAULT_URL = "http://127.0.0.1:8082"

topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics (like kafka-topics).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(topics_app, name="topics")


class Acks(StrEnum):
    """Kafka's acks: after the Delta commit (all, -1), once the leader has the record (1), at once (0)."""

    all = "all"
    minus_one = "-1"
    one = "1"
    zero = "0"


class Encoding(StrEnum):
    """How a line (produce) or a key/value in --json output (consume) is written."""

    string = "string"
    json = "json"
    binary = "binary"


def _client(url: str, timeout: float) -> TopiclakeClient:
    from topiclake.client import TopiclakeClient

    return TopiclakeClient(url, timeout=timeout)


def _unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r``, ``\\0`` and ``\\\\`` as typed on a shell command line."""
    out: list[str] = []
    chars = iter(text)
    for c in chars:
        if c != "\\":
            out.append(c)
            continue
        nxt = next(chars, "\\")
        out.append({"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}.get(nxt, "\\" + nxt))
    return "".join(out)


def _pairs(items: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"{option} expects key=value, not {item!r}")
        out[key] = value
    return out


def _echo_json(doc: object) -> None:
    import orjson

    typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


# ---------------------------------------------------------------------------------------------- topics


@topics_app.command("create")
def topics_create(
    topic: Annotated[str, typer.Argument(help="Topic name: [a-zA-Z0-9._-], 1-249 characters.")],
    partitions: Annotated[
        int, typer.Option(help="Number of partitions.", envvar="TOPICLAKE_TOPICS_PARTITIONS", min=1)
    ] = 1,
    config: Annotated[
        list[str] | None,
        typer.Option(help="A topic config key=value (repeatable).", envvar="TOPICLAKE_TOPICS_CONFIG"),
    ] = None,
    if_not_exists: Annotated[
        bool,
        typer.Option(help="Succeed if the topic exists already.", envvar="TOPICLAKE_TOPICS_IF_NOT_EXISTS"),
    ] = False,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Create a topic (and its Delta table)."""
    configs = _pairs(config, "--config")
    with _client(url, timeout) as tl:
        try:
            tl.create_topic(topic, partitions, configs)
        except TopicExists:
            if not if_not_exists:
                raise
            typer.echo(f"Topic {topic} exists already.")
            return
    typer.echo(f"Created topic {topic}.")


@topics_app.command("list")
def topics_list(
    as_json: Annotated[
        bool, typer.Option("--json", help="Every topic as JSON.", envvar="TOPICLAKE_TOPICS_JSON")
    ] = False,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """List topic names, one per line."""
    with _client(url, timeout) as tl:
        topics = sorted(tl.list_topics(), key=lambda t: t["name"])
    if as_json:
        _echo_json(topics)
        return
    for t in topics:
        typer.echo(t["name"])


@topics_app.command("describe")
def topics_describe(
    topic: Annotated[str | None, typer.Argument(help="Topic name (default: every topic).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The topic(s) as JSON.", envvar="TOPICLAKE_TOPICS_JSON")
    ] = False,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Partitions, leaders, offsets and configs of a topic, as kafka-topics --describe prints them."""
    with _client(url, timeout) as tl:
        names = [topic] if topic else sorted(t["name"] for t in tl.list_topics())
        described = [tl.describe_topic(name) for name in names]
        meta = tl.metadata()
    if as_json:
        _echo_json(described[0] if topic else described)
        return
    leaders = {(t["name"], p["partition"]): p for t in meta["topics"] for p in t["partitions"]}
    for t in described:
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        replication = t["configs"].get("replication.factor", "1")
        typer.echo(
            f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partitions']}\t"
            f"ReplicationFactor: {replication}\tConfigs: {configs}"
        )
        for o in t.get("offsets", []):
            p = leaders.get((t["name"], o["partition"]))
            leader = p["leader"] if p else "none"
            replicas = ",".join(map(str, p["replicas"])) if p else ""
            isr = ",".join(map(str, p["in_sync_replicas"])) if p else ""
            typer.echo(
                f"\tTopic: {t['name']}\tPartition: {o['partition']}\tLeader: {leader}\tReplicas: {replicas}"
                f"\tIsr: {isr}\tBeginningOffset: {o['beginning_offset']}\tEndOffset: {o['end_offset']}"
            )


@topics_app.command("alter")
def topics_alter(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[
        int | None,
        typer.Option(
            help="New partition count (can only grow).", envvar="TOPICLAKE_TOPICS_PARTITIONS", min=1
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(help="Set a topic config key=value (repeatable).", envvar="TOPICLAKE_TOPICS_CONFIG"),
    ] = None,
    delete_config: Annotated[
        list[str] | None,
        typer.Option(
            help="Reset a topic config to its default (repeatable).", envvar="TOPICLAKE_TOPICS_DELETE_CONFIG"
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Grow the partitions of a topic and set or reset its configs."""
    configs = _pairs(config, "--config")
    if partitions is None and not configs and not delete_config:
        raise InvalidRequest("nothing to alter: give --partitions, --config or --delete-config")
    with _client(url, timeout) as tl:
        if configs or delete_config:
            tl.alter_topic_configs(topic, configs, delete_config or ())
        if partitions is not None:
            tl.increase_partitions(topic, partitions)
    typer.echo(f"Altered topic {topic}.")


@topics_app.command("delete")
def topics_delete(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    if_exists: Annotated[
        bool, typer.Option(help="Succeed if there is no such topic.", envvar="TOPICLAKE_TOPICS_IF_EXISTS")
    ] = False,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Delete a topic and its data."""
    with _client(url, timeout) as tl:
        try:
            tl.delete_topic(topic)
        except TopicNotFound:
            if not if_exists:
                raise
            typer.echo(f"Topic {topic} does not exist.")
            return
    typer.echo(f"Deleted topic {topic}.")


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
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Produce the lines of stdin as records, one per line (empty lines are skipped).

    Per-record errors go to stderr as `line N: code: message`, a summary line at the end; the exit status
    is 1 when any record failed.
    """
    separator = _unescape(key_separator).encode() if key_separator else None
    headers = _pairs(header, "--header")
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
        tl = stack.enter_context(_client(url, timeout))
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


# ---------------------------------------------------------------------------------------------- consume

_FORMAT_TOKENS = "kvopTthKS%"


def _parse_format(fmt: str) -> list[str]:
    """A kcat-style format as literal strings and ``%x`` tokens."""
    parts: list[str] = []
    text = _unescape(fmt)
    literal: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 1 < len(text):
            token = text[i + 1]
            if token not in _FORMAT_TOKENS:
                raise typer.BadParameter(f"unknown token %{token}; use %k %v %o %p %t %T %h %K %S %%")
            if token == "%":
                literal.append("%")
            else:
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append("%" + token)
            i += 2
            continue
        literal.append(c)
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


def _render(parts: list[str], topic: str, partition: int, r: FetchedRecord) -> bytes:
    from topiclake.client import decode_bytes

    out: list[bytes] = []
    for part in parts:
        if not part.startswith("%") or len(part) != 2:
            out.append(part.encode())
            continue
        t = part[1]
        if t == "k":
            out.append(decode_bytes(r["key"]) or b"")
        elif t == "v":
            out.append(decode_bytes(r["value"]) or b"")
        elif t == "o":
            out.append(str(r["offset"]).encode())
        elif t == "p":
            out.append(str(partition).encode())
        elif t == "t":
            out.append(topic.encode())
        elif t == "T":
            out.append(str(r["timestamp"]).encode())
        elif t == "K":
            key = decode_bytes(r["key"])
            out.append(str(-1 if key is None else len(key)).encode())
        elif t == "S":
            value = decode_bytes(r["value"])
            out.append(str(-1 if value is None else len(value)).encode())
        elif t == "h":
            out.append(
                b",".join(h["key"].encode() + b"=" + (decode_bytes(h["value"]) or b"") for h in r["headers"])
            )
    return b"".join(out)


def _as_json(topic: str, partition: int, r: FetchedRecord, encoding: Encoding) -> bytes:
    import base64

    import orjson

    from topiclake.client import decode_bytes

    def conv(data: str | None) -> object:
        raw = decode_bytes(data)
        if raw is None or encoding is Encoding.binary:
            return data if raw is not None else None
        text = raw.decode("utf-8", errors="replace")
        if encoding is Encoding.json:
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return text if text.encode() == raw else base64.b64encode(raw).decode()
        return text

    doc = {
        "topic": topic,
        "partition": partition,
        "offset": r["offset"],
        "timestamp": r["timestamp"],
        "timestamp_type": r["timestamp_type"],
        "key": conv(r["key"]),
        "value": conv(r["value"]),
        "headers": [{"key": h["key"], "value": conv(h["value"])} for h in r["headers"]],
    }
    return orjson.dumps(doc) + b"\n"


def _parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC when it has no offset), as ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is neither ms since the epoch nor an ISO 8601 time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _start_offset(
    tl: TopiclakeClient, topic: str, partition: int, begin: int, end: int, offset: str | None, ts: int | None
) -> int:
    if ts is not None:
        found = tl.offsets(topic, partition, timestamp=ts).get("timestamp_offset")
        return end if found is None else found
    if offset is None or offset in ("beginning", "earliest"):
        return begin
    if offset in ("end", "latest"):
        return end
    try:
        n = int(offset)
    except ValueError as exc:
        raise typer.BadParameter(
            f"--offset takes beginning, end, N or -N (from the end), not {offset!r}"
        ) from exc
    return max(begin, end + n) if n < 0 else n


class _Done:
    """End of one poller's partitions."""


def _poll(
    tl: TopiclakeClient,
    topic: str,
    positions: dict[int, int],
    stops: dict[int, int] | None,
    max_records: int,
    out: queue.Queue[tuple[int, list[FetchedRecord]] | BaseException | _Done],
    halt: threading.Event,
) -> None:
    """Fetch the partitions in ``positions`` in turn until their stop offsets (or forever without stops)."""
    from topiclake.errors import OffsetOutOfRange

    def put(item: tuple[int, list[FetchedRecord]] | BaseException | _Done) -> None:
        while not halt.is_set():
            try:
                out.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    try:
        active = sorted(positions)
        while active and not halt.is_set():
            wait_ms = 0 if stops is not None else (1000 if len(active) == 1 else 200)
            for p in list(active):
                pos = positions[p]
                if stops is not None and pos >= stops[p]:
                    active.remove(p)
                    continue
                try:
                    batch = tl.fetch(topic, p, pos, max_records=max_records, wait_ms=wait_ms)
                except OffsetOutOfRange as exc:
                    start = int(exc.details.get("log_start_offset", 0))
                    end = int(exc.details.get("high_watermark", start))
                    positions[p] = start if pos < start else end
                    typer.echo(
                        f"partition {p}: offset {pos} is out of range, resetting to {positions[p]}", err=True
                    )
                    continue
                positions[p] = batch["next_offset"]
                if batch["records"]:
                    put((p, batch["records"]))
                elif stops is not None and batch["next_offset"] <= pos:
                    active.remove(p)  # nothing more to read below the stop offset
        put(_Done())
    except BaseException as exc:  # handed to the main thread, which raises it
        put(exc)


@app.command()
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to consume.")],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            help="Partition (repeatable; default: all).",
            envvar="TOPICLAKE_CONSUME_PARTITION",
        ),
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option(
            help="Start at the beginning of each partition.", envvar="TOPICLAKE_CONSUME_FROM_BEGINNING"
        ),
    ] = False,
    offset: Annotated[
        str | None,
        typer.Option(
            "--offset",
            "-o",
            help="Start at beginning, end, offset N, or -N (N before the end).",
            envvar="TOPICLAKE_CONSUME_OFFSET",
        ),
    ] = None,
    timestamp: Annotated[
        str | None,
        typer.Option(
            help="Start at the first record at or after this time (ms or ISO 8601, UTC by default).",
            envvar="TOPICLAKE_CONSUME_TIMESTAMP",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Wait for new records until Ctrl-C (default: exit at the end).",
            envvar="TOPICLAKE_CONSUME_FOLLOW",
        ),
    ] = False,
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max-messages",
            "-c",
            help="Exit after this many records.",
            envvar="TOPICLAKE_CONSUME_MAX_MESSAGES",
            min=1,
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="kcat-style output: %k key, %v value, %o offset, %p partition, %t topic, %T timestamp (ms), "
            "%h headers, %K/%S key/value length; \\n and \\t escapes.",
            envvar="TOPICLAKE_CONSUME_FORMAT",
        ),
    ] = "%v\\n",
    as_json: Annotated[
        bool,
        typer.Option("--json", help="One JSON object per record and line.", envvar="TOPICLAKE_CONSUME_JSON"),
    ] = False,
    encoding: Annotated[
        Encoding,
        typer.Option(
            help="Keys and values in --json output: string, json or binary (base64).",
            envvar="TOPICLAKE_CONSUME_ENCODING",
        ),
    ] = Encoding.string,
    max_records: Annotated[
        int, typer.Option(help="Records per fetch request.", envvar="TOPICLAKE_CONSUME_MAX_RECORDS", min=1)
    ] = 1000,
    url: Url = DEFAULT_URL,
    timeout: Timeout = 30.0,
) -> None:
    """Print the records of a topic to stdout, in offset order within each partition (like kcat -C).

    Starts at the beginning (at the end with --follow) unless --from-beginning, --offset or --timestamp
    says otherwise. Without --follow it exits at the end of every partition.
    """
    if sum((from_beginning, offset is not None, timestamp is not None)) > 1:
        raise typer.BadParameter("give only one of --from-beginning, --offset and --timestamp")
    parts = _parse_format(fmt)
    ts = _parse_timestamp(timestamp) if timestamp is not None else None
    if from_beginning:
        offset = "beginning"
    elif offset is None and timestamp is None and follow:
        offset = "end"
    out = sys.stdout.buffer
    count = 0
    halt = threading.Event()
    try:
        with _client(url, timeout) as tl:
            described = tl.describe_topic(topic)
            ends = {
                o["partition"]: (o["beginning_offset"], o["end_offset"]) for o in described.get("offsets", [])
            }
            chosen = sorted(set(partition)) if partition else sorted(ends)
            for p in chosen:
                if p not in ends:
                    raise PartitionNotFound(
                        f"topic {topic} has no partition {p} (it has {len(ends)})", topic=topic, partition=p
                    )
            positions = {p: _start_offset(tl, topic, p, *ends[p], offset, ts) for p in chosen}
            stops = None if follow else {p: ends[p][1] for p in chosen}
            n_workers = max(1, min(len(chosen), 8))
            q: queue.Queue[tuple[int, list[FetchedRecord]] | BaseException | _Done] = queue.Queue(maxsize=16)
            for w in range(n_workers):
                mine = {p: positions[p] for p in chosen[w::n_workers]}
                mine_stops = None if stops is None else {p: stops[p] for p in mine}
                threading.Thread(
                    target=_poll, args=(tl, topic, mine, mine_stops, max_records, q, halt), daemon=True
                ).start()
            done = 0
            while done < n_workers:
                item = q.get()
                if isinstance(item, _Done):
                    done += 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                p, records = item
                if max_messages is not None:
                    records = records[: max_messages - count]
                chunk = b"".join(
                    _as_json(topic, p, r, encoding) if as_json else _render(parts, topic, p, r)
                    for r in records
                )
                out.write(chunk)
                out.flush()
                count += len(records)
                if max_messages is not None and count >= max_messages:
                    break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how --follow ends
    except BrokenPipeError:
        # the reader (head, less) went away: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        halt.set()
    typer.echo(f"consumed {count:,} records from {topic}", err=True)


def main() -> None:
    """Entry point of the ``topiclake`` script: exit 1 with ``ClassName: message`` on a topiclake error."""
    try:
        app()
    except TopiclakeError as exc:
        typer.echo(f"{type(exc).__name__}: {exc.message}", err=True)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
