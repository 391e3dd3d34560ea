"""``topiclake cluster describe``: brokers, the controller, and who leads what (like kafka-metadata-quorum
and ``kafka-topics --describe`` in one look)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any

import typer

from topiclake.cli._app import DEFAULT_URL, BootstrapServer, Timeout, Url, app, client, echo_json

if TYPE_CHECKING:
    from topiclake.client import Metadata

cluster_app = typer.Typer(
    help="Describe the cluster of brokers: brokers, controller, partition leaders.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(cluster_app, name="cluster")


def summary(meta: Metadata) -> dict[str, Any]:
    """The metadata with what an operator looks for: each broker's leader count, and per topic the
    leaders per broker, the replication factor and the partitions that are under-replicated or offline."""
    live = {b["id"] for b in meta["brokers"]}
    leads: Counter[int] = Counter()
    topics: list[dict[str, Any]] = []
    for t in meta["topics"]:
        parts = t["partitions"]
        per_broker: Counter[int] = Counter(p["leader"] for p in parts if p["leader"] in live)
        leads.update(per_broker)
        topics.append(
            {
                "name": t["name"],
                "partitions": len(parts),
                "replication_factor": max((len(p["replicas"]) for p in parts), default=0),
                "leaders": {str(b): n for b, n in sorted(per_broker.items())},
                "under_replicated": [
                    p["partition"] for p in parts if len(p["in_sync_replicas"]) < len(p["replicas"])
                ],
                "offline": [p["partition"] for p in parts if p["leader"] not in live],
                "partition_states": parts,
            }
        )
    brokers = [
        {
            **b,
            "address": f"{b['host']}:{b['port']}",
            "leader_count": leads.get(b["id"], 0),
            "controller": b["id"] == meta["controller_id"],
        }
        for b in sorted(meta["brokers"], key=lambda b: b["id"])
    ]
    return {
        "cluster_id": meta["cluster_id"],
        "controller_id": meta["controller_id"],
        "brokers": brokers,
        "topics": topics,
    }


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


@cluster_app.command("describe")
def cluster_describe(
    as_json: Annotated[
        bool,
        typer.Option("--json", help="The metadata and the summary as JSON.", envvar="TOPICLAKE_CLUSTER_JSON"),
    ] = False,
    partitions: Annotated[
        bool,
        typer.Option(
            "--partitions",
            help="One row per partition (leader, epoch, replicas, ISR).",
            envvar="TOPICLAKE_CLUSTER_PARTITIONS",
        ),
    ] = False,
    url: Url = DEFAULT_URL,
    bootstrap_server: BootstrapServer = None,
    timeout: Timeout = 30.0,
) -> None:
    """Brokers (id, address, rack, leader count), the controller, and each topic's leaders, replicas and
    in-sync replicas, as any broker that answers sees them."""
    from rich.console import Console
    from rich.table import Table

    with client(url, timeout, bootstrap_server) as tl:
        doc = summary(tl.metadata())
    if as_json:
        echo_json(doc)
        return
    console = Console(soft_wrap=True)
    console.print(
        f"cluster [bold]{doc['cluster_id']}[/]: {len(doc['brokers'])} broker(s), "
        f"controller [bold]{doc['controller_id']}[/]"
    )
    brokers = Table(title="brokers", title_justify="left")
    for col in ("id", "address", "rack", "leaders", "role", "listeners"):
        brokers.add_column(col, justify="right" if col in ("id", "leaders") else "left")
    for b in doc["brokers"]:
        listeners = " ".join(f"{k}={v}" for k, v in sorted((b.get("listeners") or {}).items()))
        brokers.add_row(
            str(b["id"]),
            b["address"],
            b.get("rack") or "-",
            str(b["leader_count"]),
            "controller" if b["controller"] else "",
            listeners or "-",
        )
    console.print(brokers)
    topics = Table(title="topics", title_justify="left")
    for col in ("topic", "partitions", "rf", "leaders b:n", "under-replicated", "offline"):
        topics.add_column(col, justify="right" if col in ("partitions", "rf") else "left")
    for t in doc["topics"]:
        topics.add_row(
            t["name"],
            str(t["partitions"]),
            str(t["replication_factor"]),
            " ".join(f"{b}:{n}" for b, n in t["leaders"].items()) or "-",
            _ids(t["under_replicated"]),
            _ids(t["offline"]),
        )
    console.print(topics)
    if not partitions:
        return
    rows = Table(title="partitions", title_justify="left")
    for col in ("topic", "partition", "leader", "epoch", "replicas", "isr"):
        rows.add_column(col, justify="left" if col == "topic" else "right")
    for t in doc["topics"]:
        for p in t["partition_states"]:
            rows.add_row(
                t["name"],
                str(p["partition"]),
                str(p["leader"]),
                str(p.get("leader_epoch", "-")),
                _ids(p["replicas"]),
                _ids(p["in_sync_replicas"]),
            )
    console.print(rows)
