"""``topiclake quotas``: set, delete and describe client quotas per user, on the warehouse directly.

The quotas live in the Delta table ``_system/quotas``; every broker over the warehouse applies a change
within about a second. Like ``kafka-configs --entity-type users``: ``--user NAME`` (repeatable) or
``--user-default``, ``--add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152'`` and
``--delete-config producer_byte_rate``. Keys: ``producer_byte_rate``, ``consumer_byte_rate``,
``request_rate`` (bytes/s, bytes/s, requests/s; 0 = unlimited).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.cli._app import app
from topiclake.errors import InvalidRequest

if TYPE_CHECKING:  # imported in the commands: `topiclake` starts without loading delta-rs for them
    from topiclake.security.quota_table import QuotaChange, QuotaTable

quotas_app = typer.Typer(
    help="Set, delete and describe client quotas per user (kafka-configs --entity-type users) in the "
    "warehouse's _system/quotas.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(quotas_app, name="quotas")

Warehouse = Annotated[
    str | None,
    typer.Option(
        help="Warehouse URI (default ./data; storage options from TOPICLAKE_STORAGE_OPTIONS).",
        envvar="TOPICLAKE_WAREHOUSE",
        show_default=False,
    ),
]
Users = Annotated[
    list[str] | None,
    typer.Option("--user", help="A user (the principal User:<name>; repeatable).", show_default=False),
]
UserDefault = Annotated[
    bool, typer.Option("--user-default", help="The default user: every user without quotas of its own.")
]
AddConfig = Annotated[
    list[str] | None,
    typer.Option(
        "--add-config",
        help="key=value[,key=value] (repeatable): producer_byte_rate, consumer_byte_rate, request_rate.",
        show_default=False,
    ),
]
DeleteConfig = Annotated[
    list[str] | None,
    typer.Option(
        "--delete-config", help="key[,key] (repeatable); none: every quota of the users.", show_default=False
    ),
]


def _table(warehouse: str | None) -> QuotaTable:
    from topiclake.platform import Storage
    from topiclake.security.quota_table import QuotaTable
    from topiclake.settings import GatewaySettings

    settings = GatewaySettings(**({"warehouse": warehouse} if warehouse else {}))  # type: ignore[arg-type]
    return QuotaTable(Storage(settings.warehouse, settings.storage_options))


def _users(users: list[str] | None, default: bool) -> list[str | None]:
    names: list[str | None] = []
    for u in users or []:
        name = u.removeprefix("User:")
        if not name:
            raise InvalidRequest("--user needs a name")
        names.append(name)
    if default:
        names.append(None)
    return names


def _split(items: list[str] | None) -> list[str]:
    return [part.strip() for item in items or [] for part in item.split(",") if part.strip()]


def _changes(users: list[str | None], pairs: list[tuple[str, float | None]]) -> list[QuotaChange]:
    from topiclake.security.quota_table import QuotaChange

    return [QuotaChange(u, k, v) for u in users for k, v in pairs]


def _entity(user: str | None) -> str:
    return "<default>" if user is None else f"User:{user}"


@quotas_app.command("set")
def quotas_set(
    user: Users = None,
    user_default: UserDefault = False,
    add_config: AddConfig = None,
    warehouse: Warehouse = None,
) -> None:
    """Set quotas of users (or of the default user), in one commit."""
    users = _users(user, user_default)
    if not users:
        raise InvalidRequest("name a user: --user NAME or --user-default")
    pairs: list[tuple[str, float | None]] = []
    for item in _split(add_config):
        key, sep, value = item.partition("=")
        try:
            pairs.append((key.strip(), float(value)))
        except ValueError:
            raise InvalidRequest(f"--add-config takes key=number, not {item!r}") from None
        if not sep:
            raise InvalidRequest(f"--add-config takes key=number, not {item!r}")
    if not pairs:
        raise InvalidRequest("name what to set: --add-config producer_byte_rate=1048576")
    version = _table(warehouse).alter(
        _changes(users, pairs), f"set by the CLI: {', '.join(_split(add_config))}"
    )
    names = ", ".join(_entity(u) for u in users)
    typer.echo(f"Set {', '.join(k for k, _ in pairs)} of {names} (_system/quotas version {version}).")


@quotas_app.command("delete")
def quotas_delete(
    user: Users = None,
    user_default: UserDefault = False,
    delete_config: DeleteConfig = None,
    warehouse: Warehouse = None,
) -> None:
    """Delete quotas of users (all of theirs unless --delete-config names some): the defaults apply again."""
    from topiclake.security.quota_table import KEYS

    users = _users(user, user_default)
    if not users:
        raise InvalidRequest("name a user: --user NAME or --user-default")
    keys = _split(delete_config) or list(KEYS)
    pairs: list[tuple[str, float | None]] = [(k, None) for k in keys]
    version = _table(warehouse).alter(_changes(users, pairs), f"delete by the CLI: {', '.join(keys)}")
    names = ", ".join(_entity(u) for u in users)
    typer.echo(f"Deleted {', '.join(keys)} of {names} (_system/quotas version {version}).")


@quotas_app.command("describe")
def quotas_describe(
    user: Users = None,
    user_default: UserDefault = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    warehouse: Warehouse = None,
) -> None:
    """The quotas of every user in _system/quotas (or of the users named)."""
    _, found = _table(warehouse).read()
    wanted = _users(user, user_default)
    rows = sorted(
        ((u, values) for u, values in found.items() if not wanted or u in wanted),
        key=lambda r: (r[0] is not None, r[0] or ""),
    )
    if as_json:
        from topiclake.cli._app import echo_json

        echo_json([{"user": u, "principal": _entity(u), "quotas": values} for u, values in rows])
        return
    from rich.console import Console
    from rich.table import Table

    t = Table("user", "producer_byte_rate", "consumer_byte_rate", "request_rate")
    for u, values in rows:
        cells = [_fmt(values.get(k)) for k in ("producer_byte_rate", "consumer_byte_rate", "request_rate")]
        t.add_row(_entity(u), *cells)
    Console(width=140).print(t)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value == int(value) else f"{value:,}"
