"""``topiclake groups``: list, describe, lag, reset and delete groups (like kafka-consumer-groups)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.cli._app import (
    DEFAULT_URL,
    BootstrapServer,
    Timeout,
    Url,
    app,
    client,
    echo_json,
    parse_timestamp,
    table,
)
from topiclake.errors import InvalidRequest

if TYPE_CHECKING:
    from topiclake.client import GroupDescription, PartitionLag, ResetTo

groups_app = typer.Typer(
    help="List, describe, show the lag of, reset the offsets of and delete consumer groups "
    "(like kafka-consumer-groups).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(groups_app, name="groups")

Group = Annotated[str, typer.Argument(help="Group id.")]
AsJson = Annotated[
    bool, typer.Option("--json", help="The gateway's answer as JSON.", envvar="TOPICLAKE_GROUPS_JSON")
]
TopicFilter = Annotated[
    str | None, typer.Option("--topic", help="Only this topic.", envvar="TOPICLAKE_GROUPS_TOPIC")
]

OFFSET_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"]


def _offset_rows(group: str, rows: list[PartitionLag]) -> list[list[object]]:
    return [
        [group, r["topic"], r["partition"], r["committed_offset"], r["end_offset"], r["lag"], r["member_id"]]
        for r in rows
    ]


@groups_app.command("list")
def groups_list(
    as_json: AsJson = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Every group with members or committed offsets: state, member count and assignor."""
    with client(url, timeout, bootstrap_server) as tl:
        groups = tl.list_groups()
    if as_json:
        echo_json(groups)
        return
    table(
        ["GROUP", "STATE", "MEMBERS", "ASSIGNOR"],
        [[g["group_id"], g["state"], g["members"], g["assignor"]] for g in groups],
    )


@groups_app.command("describe")
def groups_describe(
    group: Group,
    members: Annotated[
        bool,
        typer.Option("--members", help="The members and their partitions instead of the offsets."),
    ] = False,
    state: Annotated[
        bool, typer.Option("--state", help="State, generation, assignor, leader and member count.")
    ] = False,
    topic: TopicFilter = None,
    as_json: AsJson = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Offsets, lag and owner of every partition of a group (kafka-consumer-groups --describe).

    CURRENT-OFFSET is the committed offset (the next to read; `-` when nothing is committed, and LAG then
    counts the whole partition); CONSUMER-ID is the member that owns the partition now.
    """
    if members and state:
        raise InvalidRequest("give --members or --state, not both")
    with client(url, timeout, bootstrap_server) as tl:
        described = tl.describe_group(group)
        lag = tl.group_lag(group, topic) if not (members or state) else None
    if as_json:
        echo_json({**described, "lag": lag} if lag is not None else described)
        return
    if state:
        table(
            ["GROUP", "STATE", "GENERATION", "ASSIGNOR", "LEADER", "#MEMBERS"],
            [
                [
                    group,
                    described["state"],
                    described["generation_id"],
                    described["assignor"],
                    described["leader"],
                    len(described["members"]),
                ]
            ],
        )
        return
    if not described["members"]:
        typer.echo(f"Consumer group '{group}' has no active members.\n", err=True)
    if members:
        _print_members(group, described)
        return
    assert lag is not None
    table(OFFSET_COLUMNS, _offset_rows(group, lag["partitions"]))


def _print_members(group: str, described: GroupDescription) -> None:
    rows: list[list[object]] = []
    for m in described["members"]:
        assignment = ",".join(f"{a['topic']}:{a['partition']}" for a in m["assignment"])
        rows.append(
            [group, m["member_id"], m["client_id"], m["group_instance_id"], len(m["assignment"]), assignment]
        )
    table(["GROUP", "CONSUMER-ID", "CLIENT-ID", "INSTANCE-ID", "#PARTITIONS", "ASSIGNMENT"], rows)


@groups_app.command("lag")
def groups_lag(
    group: Group,
    topic: TopicFilter = None,
    as_json: AsJson = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Lag per partition (end offset minus committed offset) and the total."""
    with client(url, timeout, bootstrap_server) as tl:
        lag = tl.group_lag(group, topic)
    if as_json:
        echo_json(lag)
        return
    table(OFFSET_COLUMNS, _offset_rows(group, lag["partitions"]))
    typer.echo(f"TOTAL-LAG {lag['total_lag']}")


def _scope(topics: list[str] | None) -> tuple[list[str] | None, list[tuple[str, int]] | None]:
    """``--topic T`` (every partition) and ``--topic T:0,2`` (those partitions), as kafka-consumer-groups."""
    whole: list[str] = []
    some: list[tuple[str, int]] = []
    for spec in topics or ():
        name, sep, numbers = spec.partition(":")
        if not name or (sep and not numbers):
            raise InvalidRequest(f"--topic takes TOPIC or TOPIC:P[,P...], not {spec!r}")
        if not sep:
            whole.append(name)
            continue
        for n in numbers.split(","):
            try:
                some.append((name, int(n)))
            except ValueError as exc:
                raise InvalidRequest(f"--topic {spec!r}: partition {n!r} is not a number") from exc
    return (whole or None), (some or None)


@groups_app.command("reset")
def groups_reset(
    group: Group,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="To the log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="To the end (skip everything).")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="To this offset.")] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="To the first record at or after this time (ISO 8601 or ms)."),
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="Move the committed offset by N (may be negative).")
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            help="TOPIC or TOPIC:P,P (repeatable; default: every partition the group committed for).",
            envvar="TOPICLAKE_GROUPS_TOPIC",
        ),
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Apply the plan (default: dry run, only print it).")
    ] = False,
    as_json: AsJson = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Reset the committed offsets of a group (kafka-consumer-groups --reset-offsets).

    Prints the plan and changes nothing unless --execute is given. New offsets are clamped to each
    partition's [log start, end]. Refused while the group has active members: stop them first.
    """
    chosen: list[tuple[ResetTo, int | None]] = []
    if to_earliest:
        chosen.append(("earliest", None))
    if to_latest:
        chosen.append(("latest", None))
    if to_offset is not None:
        chosen.append(("offset", to_offset))
    if to_datetime is not None:
        try:
            chosen.append(("timestamp", parse_timestamp(to_datetime)))
        except typer.BadParameter as exc:
            raise InvalidRequest(f"--to-datetime: {exc.message}") from exc
    if shift_by is not None:
        chosen.append(("shift", shift_by))
    if len(chosen) != 1:
        raise InvalidRequest(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime and --shift-by"
        )
    to, value = chosen[0]
    topics, partitions = _scope(topic)
    with client(url, timeout, bootstrap_server) as tl:
        result = tl.reset_offsets(group, to, value, topics=topics, partitions=partitions, dry_run=not execute)
    if as_json:
        echo_json(result)
        return
    table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [[group, e["topic"], e["partition"], e["current_offset"], e["new_offset"]] for e in result["plan"]],
    )
    if execute:
        typer.echo(f"Reset the offsets of {len(result['plan'])} partitions of group {group}.", err=True)
    else:
        typer.echo("Dry run: nothing changed. Add --execute to apply this plan.", err=True)


@groups_app.command("delete")
def groups_delete(
    group: Group,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Delete a group and its committed offsets (refused while it has active members)."""
    with client(url, timeout, bootstrap_server) as tl:
        tl.delete_group(group)
    typer.echo(f"Deleted group {group}.")
