"""``topiclake topics``: create, list, describe, alter and delete topics (like kafka-topics)."""

from __future__ import annotations

from typing import Annotated

import typer

from topiclake.cli._app import DEFAULT_URL, BootstrapServer, Timeout, Url, app, client, echo_json, pairs
from topiclake.errors import InvalidRequest, TopicExists, TopicNotFound

topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics (like kafka-topics).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(topics_app, name="topics")

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
    replication_factor: Annotated[
        int | None,
        typer.Option(
            help="Brokers that may lead each partition (default: the cluster's).",
            envvar="TOPICLAKE_TOPICS_REPLICATION_FACTOR",
            min=1,
            show_default=False,
        ),
    ] = None,
    if_not_exists: Annotated[
        bool,
        typer.Option(help="Succeed if the topic exists already.", envvar="TOPICLAKE_TOPICS_IF_NOT_EXISTS"),
    ] = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Create a topic (and its Delta table)."""
    configs = pairs(config, "--config")
    with client(url, timeout, bootstrap_server) as tl:
        try:
            tl.create_topic(topic, partitions, configs, replication_factor=replication_factor)
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
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """List topic names, one per line."""
    with client(url, timeout, bootstrap_server) as tl:
        topics = sorted(tl.list_topics(), key=lambda t: t["name"])
    if as_json:
        echo_json(topics)
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
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Partitions, leaders, offsets and configs of a topic, as kafka-topics --describe prints them."""
    with client(url, timeout, bootstrap_server) as tl:
        names = [topic] if topic else sorted(t["name"] for t in tl.list_topics())
        described = [tl.describe_topic(name) for name in names]
        meta = tl.metadata()
    if as_json:
        echo_json(described[0] if topic else described)
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
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Grow the partitions of a topic and set or reset its configs."""
    configs = pairs(config, "--config")
    if partitions is None and not configs and not delete_config:
        raise InvalidRequest("nothing to alter: give --partitions, --config or --delete-config")
    with client(url, timeout, bootstrap_server) as tl:
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
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Delete a topic and its data."""
    with client(url, timeout, bootstrap_server) as tl:
        try:
            tl.delete_topic(topic)
        except TopicNotFound:
            if not if_exists:
                raise
            typer.echo(f"Topic {topic} does not exist.")
            return
    typer.echo(f"Deleted topic {topic}.")
