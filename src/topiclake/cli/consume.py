"""``topiclake consume``: print the records of a topic, by partition and offset or as a group member."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from enum import StrEnum
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.cli import _render
from topiclake.cli._app import (
    DEFAULT_URL,
    BootstrapServer,
    Encoding,
    Timeout,
    Url,
    app,
    client,
    parse_timestamp,
)
from topiclake.cli._group_consumer import GroupConsumer, GroupOptions
from topiclake.errors import InvalidRequest, PartitionNotFound

if TYPE_CHECKING:
    from topiclake.client import FetchedRecord, TopiclakeClient


class Assignor(StrEnum):
    """How a group's partitions are spread over its members."""

    range = "range"
    roundrobin = "roundrobin"
    sticky = "sticky"
    cooperative_sticky = "cooperative-sticky"


class OffsetReset(StrEnum):
    """Kafka's auto.offset.reset."""

    earliest = "earliest"
    latest = "latest"
    none = "none"


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
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consume as a member of this consumer group: partitions assigned by the gateway, "
            "starting at the group's committed offsets.",
            envvar="TOPICLAKE_CONSUME_GROUP",
        ),
    ] = None,
    assignor: Annotated[
        Assignor,
        typer.Option(help="The group's partition assignor (--group).", envvar="TOPICLAKE_CONSUME_ASSIGNOR"),
    ] = Assignor.cooperative_sticky,
    session_timeout_ms: Annotated[
        int,
        typer.Option(
            help="Kafka's session.timeout.ms: removed from the group after this long without a heartbeat.",
            envvar="TOPICLAKE_CONSUME_SESSION_TIMEOUT_MS",
            min=1,
        ),
    ] = 45_000,
    heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            help="Kafka's heartbeat.interval.ms (at most a third of the session timeout).",
            envvar="TOPICLAKE_CONSUME_HEARTBEAT_INTERVAL_MS",
            min=1,
        ),
    ] = 3_000,
    max_poll_interval_ms: Annotated[
        int,
        typer.Option(
            help="Kafka's max.poll.interval.ms.", envvar="TOPICLAKE_CONSUME_MAX_POLL_INTERVAL_MS", min=1
        ),
    ] = 300_000,
    reset: Annotated[
        OffsetReset,
        typer.Option(
            help="Kafka's auto.offset.reset: where to start a partition the group has no (valid) committed "
            "offset for (--group).",
            envvar="TOPICLAKE_CONSUME_RESET",
        ),
    ] = OffsetReset.latest,
    commit_before: Annotated[
        bool,
        typer.Option(
            help="Commit before printing (at-most-once) instead of after (at-least-once) (--group).",
            envvar="TOPICLAKE_CONSUME_COMMIT_BEFORE",
        ),
    ] = False,
    client_id: Annotated[
        str,
        typer.Option(help="Client id of the group member (--group).", envvar="TOPICLAKE_CONSUME_CLIENT_ID"),
    ] = "topiclake-cli",
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Print the records of a topic to stdout, in offset order within each partition (like kcat -C).

    Starts at the beginning (at the end with --follow) unless --from-beginning, --offset or --timestamp
    says otherwise. Without --follow it exits at the end of every partition.

    With --group it consumes as a member of a consumer group: the gateway assigns it partitions (shared with
    the group's other members), it starts at the group's committed offsets (else per --reset, or earliest
    with --from-beginning), commits after printing each batch (before, with --commit-before), follows
    rebalances, and leaves the group on exit or Ctrl-C. Without --follow it exits once its partitions are
    at their end.
    """
    if group is not None:
        if partition or offset is not None or timestamp is not None:
            raise InvalidRequest(
                "--group assigns the partitions and starts at the group's committed offsets: "
                "--partition, --offset and --timestamp do not apply (see `topiclake groups reset`)"
            )
        options = GroupOptions(
            group=group,
            topic=topic,
            assignor=assignor.value,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            client_id=client_id,
            reset="earliest" if from_beginning else reset.value,
            commit_before=commit_before,
            follow=follow,
            max_messages=max_messages,
            max_records=max_records,
        )
        _consume_group(options, _render.parse_format(fmt), as_json, encoding, url, timeout, bootstrap_server)
        return
    if sum((from_beginning, offset is not None, timestamp is not None)) > 1:
        raise typer.BadParameter("give only one of --from-beginning, --offset and --timestamp")
    parts = _render.parse_format(fmt)
    ts = parse_timestamp(timestamp) if timestamp is not None else None
    if from_beginning:
        offset = "beginning"
    elif offset is None and timestamp is None and follow:
        offset = "end"
    out = sys.stdout.buffer
    count = 0
    halt = threading.Event()
    try:
        with client(url, timeout, bootstrap_server) as tl:
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
                try:  # a timeout: Ctrl-C handled by a fetch thread must still reach this one (quiet topic)
                    item = q.get(timeout=0.2)
                except queue.Empty:
                    continue
                if isinstance(item, _Done):
                    done += 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                p, records = item
                if max_messages is not None:
                    records = records[: max_messages - count]
                chunk = b"".join(
                    _render.as_json(topic, p, r, encoding) if as_json else _render.render(parts, topic, p, r)
                    for r in records
                )
                # counted before the write: once a reader can see them, they are counted (with
                # PYTHONUNBUFFERED the write itself reaches the reader; a Ctrl-C right after it must not
                # leave them out of the summary)
                count += len(records)
                out.write(chunk)
                out.flush()
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


def _consume_group(
    options: GroupOptions,
    parts: list[str],
    as_json: bool,
    encoding: Encoding,
    url: str,
    timeout: float,
    bootstrap_server: str | None,
) -> None:
    """``consume --group``: run a :class:`GroupConsumer` printing to stdout; SIGTERM ends it like Ctrl-C."""
    out = sys.stdout.buffer

    def emit(topic: str, partition: int, records: list[FetchedRecord]) -> None:
        out.write(
            b"".join(
                _render.as_json(topic, partition, r, encoding)
                if as_json
                else _render.render(parts, topic, partition, r)
                for r in records
            )
        )
        out.flush()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    consumer: GroupConsumer | None = None
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with client(url, timeout, bootstrap_server) as tl:
            tl.describe_topic(options.topic)  # an unknown topic is an error, not an empty subscription
            consumer = GroupConsumer(tl, options, emit)
            consumer.run()
    except KeyboardInterrupt:
        pass  # Ctrl-C is how --follow ends; run() committed and left the group
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        signal.signal(signal.SIGTERM, previous)
    count = consumer.count if consumer is not None else 0
    typer.echo(f"consumed {count:,} records from {options.topic} in group {options.group}", err=True)
