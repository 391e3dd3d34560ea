"""``topiclake acls``: add, remove and list ACLs, with kafka-acls' options, on the warehouse directly.

The ACLs live in the Delta table ``_system/acls`` of the warehouse; every broker over it sees a change
within a second. Like kafka-acls: ``--allow-principal``/``--deny-principal`` (repeatable),
``--allow-host``/``--deny-host`` (default ``*``), ``--operation`` (repeatable), resources ``--topic``,
``--group``, ``--transactional-id`` (repeatable), ``--cluster``, ``--resource-pattern-type``
(literal | prefixed, and any | match for list/remove), and the ``--producer``/``--consumer`` shortcuts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from topiclake.cli._app import app
from topiclake.errors import InvalidRequest

if TYPE_CHECKING:  # imported in the commands: `topiclake` starts without loading delta-rs for them
    from topiclake.security import AclBinding, Authorizer, Operation, PatternType, ResourceType

acls_app = typer.Typer(
    help="Add, remove and list ACLs (kafka-acls' options) in the warehouse's _system/acls.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(acls_app, name="acls")

Warehouse = Annotated[
    str | None,
    typer.Option(
        help="Warehouse URI (default ./data; storage options from TOPICLAKE_STORAGE_OPTIONS).",
        envvar="TOPICLAKE_WAREHOUSE",
        show_default=False,
    ),
]
Strs = list[str] | None
AllowPrincipal = Annotated[Strs, typer.Option("--allow-principal", help="User:<name> allowed (repeatable).")]
DenyPrincipal = Annotated[Strs, typer.Option("--deny-principal", help="User:<name> denied (repeatable).")]
AllowHost = Annotated[Strs, typer.Option("--allow-host", help="Host the allow applies to (default *).")]
DenyHost = Annotated[Strs, typer.Option("--deny-host", help="Host the deny applies to (default *).")]
Ops = Annotated[
    Strs,
    typer.Option(
        "--operation",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
        "IdempotentWrite or All (repeatable).",
    ),
]
Topics = Annotated[Strs, typer.Option("--topic", help="Topic (repeatable; * = every topic).")]
Groups = Annotated[Strs, typer.Option("--group", help="Consumer group (repeatable; * = every group).")]
TxnIds = Annotated[Strs, typer.Option("--transactional-id", help="Transactional id (repeatable).")]
ClusterFlag = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
PatternOpt = Annotated[
    str,
    typer.Option(
        "--resource-pattern-type",
        help="literal or prefixed (add); also any or match (list, remove).",
    ),
]
Producer = Annotated[bool, typer.Option("--producer", help="Write, Describe, Create on the topics.")]
Consumer = Annotated[bool, typer.Option("--consumer", help="Read, Describe on topics; Read on groups.")]
Idempotent = Annotated[
    bool, typer.Option("--idempotent", help="With --producer: IdempotentWrite on the cluster.")
]


def _authorizer(warehouse: str | None) -> Authorizer:
    from topiclake.platform import Storage
    from topiclake.security import Authorizer
    from topiclake.settings import GatewaySettings

    settings = GatewaySettings(**({"warehouse": warehouse} if warehouse else {}))  # type: ignore[arg-type]
    return Authorizer(Storage(settings.warehouse, settings.storage_options))


def _resources(topics: Strs, groups: Strs, txn_ids: Strs, cluster: bool) -> list[tuple[ResourceType, str]]:
    from topiclake.security import CLUSTER_NAME, ResourceType

    out = [(ResourceType.TOPIC, t) for t in topics or ()]
    out += [(ResourceType.GROUP, g) for g in groups or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids or ()]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _principals(items: Strs) -> list[str]:
    from topiclake.security import Principal

    for p in items or ():
        try:
            Principal.parse(p)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return list(items or ())


def _hosts(items: Strs) -> list[str | None]:
    """The hosts given, or [None] (any host) for remove."""
    return list(items) if items else [None]


def _ops(items: Strs) -> list[Operation]:
    from topiclake.security import parse_operation

    try:
        return [parse_operation(o) for o in items or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _pattern(text: str) -> tuple[PatternType | None, bool]:
    """(pattern type or None for ANY, match)."""
    from topiclake.security import parse_pattern_type

    t = text.strip().lower()
    if t == "any":
        return None, False
    if t == "match":
        return None, True
    try:
        return parse_pattern_type(t), False
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _shortcut_ops(
    resources: list[tuple[ResourceType, str]], producer: bool, consumer: bool, idempotent: bool
) -> list[tuple[ResourceType, str, Operation]]:
    from topiclake.security import CLUSTER_NAME, Operation, ResourceType

    out: list[tuple[ResourceType, str, Operation]] = []
    for rtype, name in resources:
        if producer and rtype == ResourceType.TOPIC:
            out += [(rtype, name, op) for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
        if producer and rtype == ResourceType.TRANSACTIONAL_ID:
            out += [(rtype, name, op) for op in (Operation.WRITE, Operation.DESCRIBE)]
        if consumer and rtype == ResourceType.TOPIC:
            out += [(rtype, name, op) for op in (Operation.READ, Operation.DESCRIBE)]
        if consumer and rtype == ResourceType.GROUP:
            out.append((rtype, name, Operation.READ))
    if producer and idempotent:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE))
    return out


@acls_app.command("add")
def acls_add(
    allow_principal: AllowPrincipal = None,
    deny_principal: DenyPrincipal = None,
    allow_host: AllowHost = None,
    deny_host: DenyHost = None,
    operation: Ops = None,
    topic: Topics = None,
    group: Groups = None,
    transactional_id: TxnIds = None,
    cluster: ClusterFlag = False,
    resource_pattern_type: PatternOpt = "literal",
    producer: Producer = False,
    consumer: Consumer = False,
    idempotent: Idempotent = False,
    warehouse: Warehouse = None,
) -> None:
    """Add ACLs: every principal x host x operation x resource given."""
    from topiclake.security import AclBinding, PatternType, Permission, ResourceType

    pattern, match = _pattern(resource_pattern_type)
    if pattern is None or match:
        raise typer.BadParameter("add takes --resource-pattern-type literal or prefixed")
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        raise InvalidRequest("name a resource: --topic, --group, --transactional-id or --cluster")
    if consumer and not group:
        raise InvalidRequest("--consumer needs --group (as kafka-acls)")
    triples = [(r, n, op) for r, n in resources for op in _ops(operation)]
    triples += _shortcut_ops(resources, producer, consumer, idempotent)
    if not triples:
        raise InvalidRequest("name an --operation, or use --producer or --consumer")
    bindings: list[AclBinding] = []
    for permission, principals, hosts in (
        (Permission.ALLOW, _principals(allow_principal), allow_host or ["*"]),
        (Permission.DENY, _principals(deny_principal), deny_host or ["*"]),
    ):
        for p in principals:
            for h in hosts:
                for rtype, name, op in triples:
                    pat = PatternType.LITERAL if rtype == ResourceType.CLUSTER else pattern
                    bindings.append(AclBinding(p, h, rtype, name, pat, op, permission))
    if not bindings:
        raise InvalidRequest("name a principal: --allow-principal or --deny-principal")
    authz = _authorizer(warehouse)
    authz.add(bindings)
    typer.echo(f"Added {len(set(bindings))} ACLs.")
    _print(list(dict.fromkeys(bindings)))


@acls_app.command("remove")
def acls_remove(
    allow_principal: AllowPrincipal = None,
    deny_principal: DenyPrincipal = None,
    allow_host: AllowHost = None,
    deny_host: DenyHost = None,
    operation: Ops = None,
    topic: Topics = None,
    group: Groups = None,
    transactional_id: TxnIds = None,
    cluster: ClusterFlag = False,
    resource_pattern_type: PatternOpt = "literal",
    producer: Producer = False,
    consumer: Consumer = False,
    idempotent: Idempotent = False,
    force: Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")] = False,
    warehouse: Warehouse = None,
) -> None:
    """Remove the ACLs the options select (no principal/host/operation given: every ACL of the resources)."""
    from topiclake.security import AclFilter, Permission, ResourceType

    pattern, match = _pattern(resource_pattern_type)
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        raise InvalidRequest("name a resource: --topic, --group, --transactional-id or --cluster")
    triples: list[tuple[ResourceType, str, Operation | None]] = [
        (r, n, op) for r, n in resources for op in _ops(operation)
    ]
    triples += _shortcut_ops(resources, producer, consumer, idempotent)
    if not triples:
        triples = [(r, n, None) for r, n in resources]
    selectors: list[tuple[Permission | None, str | None, str | None]] = []
    sides: list[tuple[Permission, list[str], list[str | None]]] = [
        (Permission.ALLOW, _principals(allow_principal), _hosts(allow_host)),
        (Permission.DENY, _principals(deny_principal), _hosts(deny_host)),
    ]
    for side, principals, hosts in sides:
        for p in principals:
            for h in hosts:
                selectors.append((side, p, h))
    if not selectors:
        selectors = [(None, None, None)]
    if not force and not typer.confirm("Remove the matching ACLs?"):
        raise typer.Exit(1)
    authz = _authorizer(warehouse)
    filters = [
        AclFilter(
            principal=principal,
            host=host,
            resource_type=rtype,
            resource_name=name,
            pattern_type=None if rtype == ResourceType.CLUSTER else pattern,
            operation=op,
            permission=permission,
            match=match,
        )
        for permission, principal, host in selectors
        for rtype, name, op in triples
    ]
    removed = authz.remove(*filters)  # one commit
    typer.echo(f"Removed {len(removed)} ACLs.")
    _print(removed)


@acls_app.command("list")
def acls_list(
    principal: Annotated[Strs, typer.Option("--principal", help="Only ACLs of this principal.")] = None,
    topic: Topics = None,
    group: Groups = None,
    transactional_id: TxnIds = None,
    cluster: ClusterFlag = False,
    resource_pattern_type: PatternOpt = "any",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    warehouse: Warehouse = None,
) -> None:
    """List ACLs (of the resources given, else all), as a table."""
    from topiclake.security import AclFilter

    pattern, match = _pattern(resource_pattern_type)
    resources: list[tuple[ResourceType | None, str | None]] = list(
        _resources(topic, group, transactional_id, cluster)
    ) or [(None, None)]
    authz = _authorizer(warehouse)
    found: list[AclBinding] = []
    wanted: list[str | None] = list(_principals(principal)) or [None]
    for p in wanted:
        for rtype, name in resources:
            flt = AclFilter(
                principal=p, resource_type=rtype, resource_name=name, pattern_type=pattern, match=match
            )
            found += [b for b in authz.list(flt) if b not in found]
    if as_json:
        from topiclake.cli._app import echo_json

        echo_json([{k: str(v) for k, v in b.__dict__.items()} for b in found])
        return
    _print(found)


def _print(bindings: list[AclBinding]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table("Principal", "Host", "Resource type", "Name", "Pattern", "Operation", "Permission")
    for b in bindings:
        t.add_row(
            b.principal,
            b.host,
            b.resource_type.value,
            b.resource_name,
            b.pattern_type.value,
            b.operation.value,
            b.permission.value,
        )
    Console(width=140).print(t)
