"""``topiclake``: the command line. Every option can also come from the environment (``TOPICLAKE_*``).

One module per command family: ``serve`` (and ``version``), ``topics``, ``produce``, ``consume`` (also as a
group member, see ``_group_consumer``), ``groups``, ``cluster`` (describe the brokers), ``jobs`` (the Spark
jobs) and ``sql``; ``_app`` holds the Typer app and shared options.
"""

from __future__ import annotations

import typer

from topiclake.cli import acls, cluster, consume, groups, jobs, produce, serve, sql, topics, users
from topiclake.cli._app import app
from topiclake.errors import TopiclakeError

__all__ = [
    "acls",
    "app",
    "cluster",
    "consume",
    "groups",
    "jobs",
    "main",
    "produce",
    "serve",
    "sql",
    "topics",
    "users",
]


def main() -> None:
    """Entry point of the ``topiclake`` script: exit 1 with ``ClassName: message`` on a topiclake error."""
    try:
        app()
    except TopiclakeError as exc:
        typer.echo(f"{type(exc).__name__}: {exc.message}", err=True)
        raise SystemExit(1) from exc
