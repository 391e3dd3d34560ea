"""``topiclake``: the command line. Every option can also come from the environment (``TOPICLAKE_*``).

One module per command family: ``serve`` (and ``version``), ``topics``, ``produce``, ``consume`` (also as a
group member, see ``_group_consumer``), ``groups``, ``acls``, ``users``, ``quotas``, ``cluster`` (describe
the brokers), ``jobs`` (the Spark jobs) and ``sql``; ``_app`` holds the Typer app and shared options.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import typer

from topiclake.cli import acls, cluster, consume, groups, jobs, produce, quotas, serve, sql, topics, users
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
    "quotas",
    "run",
    "serve",
    "sql",
    "topics",
    "users",
]


def run(argv: Sequence[str] | None = None) -> int:
    """Run one ``topiclake`` command in this process and return its exit code (never exits).

    Args:
        argv: The arguments after ``topiclake``; None: ``sys.argv[1:]``.

    Returns:
        The command's code: 0, 1 with ``ClassName: message`` on stderr for a topiclake error, 2 for a
        usage error.
    """
    try:
        app(args=list(argv) if argv is not None else None)
    except TopiclakeError as exc:
        typer.echo(f"{type(exc).__name__}: {exc.message}", err=True)
        return 1
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        raise
    return 0


def main() -> NoReturn:
    """Entry point of the ``topiclake`` script: the command's code as the process's, every time.

    The process ends through :func:`topiclake.process.run_and_exit` (delta-rs may abort Python's own
    teardown, delta-io/delta-rs#2184).
    """
    from topiclake.process import run_and_exit

    run_and_exit(run)
