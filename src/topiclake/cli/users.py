"""``topiclake users``: add, remove and list the users of an htpasswd-format users file (bcrypt).

The same file Apache's ``htpasswd -B`` manages; ``add`` also writes the user's SCRAM keys beside it
(``<file>.scram``) for SASL/SCRAM on the Kafka listener. A running broker sees changes without a restart.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from topiclake.cli._app import app

users_app = typer.Typer(
    help="Add, remove and list users (htpasswd-format file, bcrypt; docs/security.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(users_app, name="users")

UsersFile = Annotated[
    str,
    typer.Option("--users-file", envvar="TOPICLAKE_USERS_FILE", help="The htpasswd-format users file."),
]


def _password(name: str, password_stdin: bool) -> str:
    if password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    from_env = os.environ.get("TOPICLAKE_USER_PASSWORD")
    if from_env:
        return from_env
    return str(typer.prompt(f"Password for {name}", hide_input=True, confirmation_prompt=True))


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="User name (the principal is User:<name>).")],
    users_file: UsersFile,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from the first line of stdin.")
    ] = False,
) -> None:
    """Add a user or set a new password (prompted, --password-stdin, or TOPICLAKE_USER_PASSWORD)."""
    from topiclake.security import UserStore

    password = _password(name, password_stdin)
    try:
        UserStore(users_file).add(name, password)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"Saved user {name} in {users_file}.")


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(help="User name.")],
    users_file: UsersFile,
) -> None:
    """Remove a user (their ACLs stay: remove them with `topiclake acls remove --principal`)."""
    from topiclake.security import UserStore

    if not UserStore(users_file).remove(name):
        typer.echo(f"No user {name} in {users_file}.", err=True)
        raise typer.Exit(1)
    typer.echo(f"Removed user {name}.")


@users_app.command("list")
def users_list(users_file: UsersFile) -> None:
    """List user names, one per line."""
    from topiclake.security import UserStore

    for name in UserStore(users_file).names():
        typer.echo(name)
