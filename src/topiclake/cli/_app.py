"""The ``topiclake`` Typer app and what its commands share: gateway options, enums, small parsers."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.errors import InvalidRequest

if TYPE_CHECKING:
    from topiclake.client import TopiclakeClient

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


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: on object storage the broker's own client sends hundreds a second
    # (data files, log entries, checkpoints), a line each, filling a parent's pipe and costing CPU
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


# ---------------------------------------------------------------------------------------------- clients

Url = Annotated[
    str,
    typer.Option("--url", envvar="TOPICLAKE_URL", help="Base URL of the gateway (`topiclake serve`)."),
]
BootstrapServer = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-server",
        envvar="TOPICLAKE_BOOTSTRAP_SERVER",
        help="Brokers of a cluster, host:port[,host:port...]: metadata from any that answers, each "
        "partition's requests to its leader, retries on a dead broker. Wins over --url.",
        show_default=False,
    ),
]
Timeout = Annotated[
    float, typer.Option("--timeout", envvar="TOPICLAKE_TIMEOUT", help="Seconds to wait for each answer.")
]
DEFAULT_URL = "http://127.0.0.1:8082"


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


def client(
    url: str, timeout: float, bootstrap_server: str | None = None, *, idempotent: bool | None = None
) -> TopiclakeClient:
    """A client of the gateway at ``url``, or of the cluster behind ``bootstrap_server`` when given."""
    from topiclake.client import TopiclakeClient

    headers = credentials()
    if bootstrap_server:
        return TopiclakeClient(
            timeout=timeout, bootstrap_servers=bootstrap_server, idempotent=idempotent, headers=headers
        )
    return TopiclakeClient(url, timeout=timeout, headers=headers)


def credentials() -> dict[str, str]:
    """The Authorization header for a broker with auth on, from the environment (docs/security.md):
    ``TOPICLAKE_CLIENT_TOKEN`` (a JWT) or ``TOPICLAKE_CLIENT_USER`` + ``TOPICLAKE_CLIENT_PASSWORD``."""
    import base64
    import os

    token = os.environ.get("TOPICLAKE_CLIENT_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user = os.environ.get("TOPICLAKE_CLIENT_USER")
    if user:
        pair = f"{user}:{os.environ.get('TOPICLAKE_CLIENT_PASSWORD', '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}


def unescape(text: str) -> str:
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


def pairs(items: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"{option} expects key=value, not {item!r}")
        out[key] = value
    return out


def echo_json(doc: object) -> None:
    import orjson

    typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


def parse_timestamp(text: str) -> int:
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


def table(header: list[str], rows: list[list[object]]) -> None:
    """Print rows as columns aligned like kafka-consumer-groups (two spaces between columns)."""
    cells = [header, *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
