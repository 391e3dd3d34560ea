"""Who may see and do what in the console: the request's principal and the gateway's ACLs.

The gateway's authentication middleware has checked each console route's row of the route table
(``api/auth/route_acls.py``) before a page runs; here the pages ask what they show and offer. The gateway
plugs its checks in with :func:`mount` (``console.mount(app, access=...)``): a function from an ASGI scope
to an object that answers ``allowed(operation, resource_type, name)`` for that request (the API's
``Access``). Without one (a console mounted on its own) everyone may do everything.

The overview pages (``/ui``, ``/ui/topics``, ``/ui/groups``, ``/ui/jobs``, the charts' data) show what
Kafka's listings show (docs/console.md): a principal with Describe on the cluster sees every topic and group
(it may read every name from ``/metrics`` anyway); any other sees the topics and groups it may Describe,
and the totals, rates and warnings are worked out over those. Brokers and the controller are shown to
every authenticated principal, as Kafka's Metadata shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request

from topiclake.security import CLUSTER_NAME, Operation, ResourceType

ANONYMOUS = "anonymous"

# Kafka's ACL operations the console checks, on resources like "topic:orders", "group:billing" or
# "cluster".
ACTIONS = ("Describe", "Read", "Write", "Create", "AlterConfigs", "Delete")

_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER}


class Checker(Protocol):
    """The ACL questions of one request (the API's ``Access`` is one)."""

    @property
    def principal(self) -> object:
        """Who is asking."""

    @property
    def enforced(self) -> bool:
        """Whether ACLs apply (auth on)."""

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the principal may ``operation`` the resource."""


#: What the gateway plugs in: the :class:`Checker` of an ASGI scope.
AccessOf = Callable[[Any], Checker]


def install(app: Any, access_of: AccessOf | None) -> None:
    """Make ``access_of`` answer the console's questions on ``app`` (None: everything allowed)."""
    app.state.console_access = access_of


def _checker(request: Request) -> Checker | None:
    access_of: AccessOf | None = getattr(request.app.state, "console_access", None)
    return None if access_of is None else access_of(request.scope)


def principal(request: Request) -> str:
    """The principal making this request (``anonymous`` when authentication is off)."""
    checker = _checker(request)
    if checker is None or not checker.enforced:
        return ANONYMOUS
    return str(checker.principal)


def allowed(request: Request, action: str, resource: str) -> bool:
    """Whether this request's principal may do ``action`` (one of :data:`ACTIONS`) on ``resource``
    (``topic:<name>``, ``group:<name>`` or ``cluster``)."""
    checker = _checker(request)
    if checker is None:
        return True
    kind, _, name = resource.partition(":")
    rtype = _TYPES[kind]
    return checker.allowed(Operation(action), rtype, CLUSTER_NAME if rtype is ResourceType.CLUSTER else name)


def _everything(name: str) -> bool:
    return True


@dataclass(frozen=True)
class Visible:
    """What an overview page may list for one request.

    Attributes:
        everything: The principal may Describe the cluster (or auth is off): nothing is filtered.
        topic: Whether a topic may be listed (Describe on it).
        group: Whether a consumer group may be listed (Describe on it).
    """

    everything: bool
    topic: Callable[[str], bool] = _everything
    group: Callable[[str], bool] = _everything


ALL = Visible(True)


def visible(request: Request) -> Visible:
    """What the overview pages show this request's principal (see the module docstring)."""
    checker = _checker(request)
    if checker is None or not checker.enforced:
        return ALL
    if checker.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ALL
    return Visible(
        False,
        topic=lambda name: checker.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name),
        group=lambda name: checker.allowed(Operation.DESCRIBE, ResourceType.GROUP, name),
    )
