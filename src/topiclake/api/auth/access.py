"""What the routes ask about the request's principal: may it do this, which of these may it see.

The authentication middleware puts the principal in the ASGI scope (``topiclake.principal``) and the
client's address (``topiclake.client_host``); :class:`Access` answers with the gateway's authorizer.
``CLIENT`` carries both to code below the routes that sends requests to other brokers on the client's
behalf (:class:`~topiclake.api.forwarding.HttpForwarder`), which signs them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from topiclake.errors import Forbidden
from topiclake.platform.storage import Storage
from topiclake.security import (
    ANONYMOUS,
    CLUSTER_NAME,
    Operation,
    Principal,
    ResourceType,
    Security,
    security_from_settings,
)
from topiclake.settings import GatewaySettings

logger = logging.getLogger(__name__)


PRINCIPAL_KEY = "topiclake.principal"
HOST_KEY = "topiclake.client_host"

_T = TypeVar("_T")


def security_of(app: Any) -> Security | None:
    """The app's :class:`Security` (None before the lifespan made it: then nothing is enforced)."""
    sec = getattr(getattr(app, "state", None), "security", None)
    return sec if isinstance(sec, Security) else None


class Access:
    """The authorization questions of one request."""

    def __init__(self, security: Security | None, principal: Principal, host: str) -> None:
        self.security = security
        self.principal = principal
        self.host = host

    @property
    def enforced(self) -> bool:
        """Whether ACLs apply to this request (auth on)."""
        return self.security is not None and self.security.auth

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the principal may perform ``operation`` on the resource."""
        if self.security is None:
            return True
        return self.security.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def require(self, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """Raise :class:`~topiclake.errors.Forbidden` unless :meth:`allowed`."""
        if not self.allowed(operation, resource_type, name):
            raise forbidden(self.principal, operation, resource_type, name)

    def require_topics(self, operation: Operation, topics: Iterable[str]) -> None:
        """:meth:`require` ``operation`` on each topic."""
        for t in dict.fromkeys(topics):
            self.require(operation, ResourceType.TOPIC, t)

    def require_create(self, topic: str) -> None:
        """Kafka's CreateTopics rule: Create on the cluster, or else Create on the topic."""
        if not self.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            self.require(Operation.CREATE, ResourceType.TOPIC, topic)

    def require_idempotent_write(self) -> None:
        """Kafka's InitProducerId rule (KIP-679): IdempotentWrite on the cluster, or Write on some topic."""
        if self.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
            return
        sec = self.security
        if sec is not None and not sec.authorizer.authorize_any(
            self.principal, self.host, Operation.WRITE, ResourceType.TOPIC
        ):
            raise forbidden(self.principal, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)

    def visible(
        self,
        items: Iterable[_T],
        name: Any = None,
        resource_type: ResourceType = ResourceType.TOPIC,
        operation: Operation = Operation.DESCRIBE,
    ) -> list[_T]:
        """The items whose resource the principal may ``operation`` (Describe): listings never show more.

        ``name`` maps an item to its resource name (default: the item is the name).
        """
        key = name or (lambda item: item)
        return [i for i in items if self.allowed(operation, resource_type, str(key(i)))]


def forbidden(
    principal: Principal, operation: Operation, resource_type: ResourceType, name: str
) -> Forbidden:
    """The 403 error (names only what the client named itself)."""
    return Forbidden(
        f"{principal} is not authorized to {operation.value} {resource_type.value} {name!r}",
        operation=operation.value,
        resource_type=resource_type.value,
        resource_name=name,
    )


def access_of(scope: Any) -> Access:
    """The :class:`Access` of an ASGI scope."""
    principal = scope.get(PRINCIPAL_KEY, ANONYMOUS)
    host = scope.get(HOST_KEY) or (scope.get("client") or ("", 0))[0]
    return Access(security_of(scope.get("app")), principal, host)


async def get_access(request: Request) -> Access:
    """FastAPI dependency: the :class:`Access` of the request."""
    return access_of(request.scope)


AccessDep = Annotated[Access, Depends(get_access)]


def make_security(settings: GatewaySettings, storage: Storage) -> Security:
    """The gateway's :class:`Security` over the broker's warehouse; logs loudly when the broker is open."""
    sec = security_from_settings(
        settings.model_copy(update={"warehouse": storage.root}), storage.storage_options
    )
    if not sec.auth:
        logger.warning(
            "AUTHENTICATION IS OFF: anyone who can reach this broker can read, write and delete every "
            "topic and group. Turn it on with --auth (docs/security.md)."
        )
    else:
        sec.authorizer.start()
    return sec
