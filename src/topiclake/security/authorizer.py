"""Kafka's StandardAuthorizer rules over the bindings in ``_system/acls``.

A request is allowed when the principal is a super user, or when no DENY binding matches it and an ALLOW
binding does. A binding matches when its principal is the principal or ``User:*``, its host is the
client's or ``*``, its resource pattern covers the resource (literal name, literal ``*``, or a prefix) and
its operation is the one asked or ``All``. As in Kafka, an ALLOW of Read, Write, Delete or Alter also
allows Describe, and an ALLOW of AlterConfigs also allows DescribeConfigs (denies imply nothing). Nothing
is allowed without a matching ACL (``allow.everyone.if.no.acl.found=false``).

Every broker keeps the bindings in memory and polls the table's version (one log listing) every
``poll_interval_s``: a change made through any broker is seen within that time (0.5 s on a local disk,
:data:`OBJECT_STORE_POLL_S` on object storage, where each listing is a billed request; the broker that
made a change applies it at once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence

from topiclake.errors import TopiclakeError
from topiclake.platform.storage import Storage
from topiclake.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclFilter,
    Operation,
    Permission,
    ResourceType,
)
from topiclake.security.acl_table import AclTable
from topiclake.security.principal import Principal

logger = logging.getLogger(__name__)

#: How often a broker looks for ACL changes made elsewhere, seconds: on a local disk, and on object storage
#: (a billed LIST each time; an idle broker's requests, issue 28).
LOCAL_POLL_S = 0.5
OBJECT_STORE_POLL_S = 10.0

_ANY = AclFilter()

#: Operations whose ALLOW also allows another one (Kafka's implied operations).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


class Authorizer:
    """Decides whether a principal may perform an operation on a resource.

    Args:
        storage: The warehouse holding ``_system/acls`` (None: no table, e.g. auth off in a test).
        super_users: Principals allowed everything (``User:admin``), Kafka's ``super.users``.
        enabled: False when authentication is off: :meth:`authorize` always answers True.
        poll_interval_s: How often the table's version is checked for changes by other brokers (default:
            :data:`LOCAL_POLL_S`, :data:`OBJECT_STORE_POLL_S` on object storage).
    """

    def __init__(
        self,
        storage: Storage | None,
        super_users: Iterable[str] = (),
        *,
        enabled: bool = True,
        poll_interval_s: float | None = None,
    ) -> None:
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        if poll_interval_s is None:
            local = storage is None or storage.is_local
            poll_interval_s = LOCAL_POLL_S if local else OBJECT_STORE_POLL_S
        self.poll_interval_s = poll_interval_s
        self._table = AclTable(storage) if storage is not None else None
        self._lock = threading.Lock()
        self._bindings: tuple[AclBinding, ...] = ()
        #: (principal, resource type) -> bindings: a check looks at its principal's and User:*'s only
        self._index: dict[tuple[str, ResourceType], tuple[AclBinding, ...]] = {}
        self._version = -2  # never loaded
        self._checked = 0.0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # -- the decision ----------------------------------------------------------------------------------

    def authorize(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may perform ``operation`` on the resource."""
        if not self.enabled:
            return True
        who = str(principal)
        if who in self.super_users:
            return True
        allowed = False
        implied = _IMPLIED_BY.get(operation, frozenset({operation}))
        self._current()
        index = self._index
        mine = index.get((who, resource_type), ())
        everyone = index.get((WILDCARD_PRINCIPAL, resource_type), ())
        for b in (*mine, *everyone):
            if b.host not in (WILDCARD, host) or not b.applies_to(resource_type, name):
                continue
            if b.permission == Permission.DENY:
                if b.operation in (operation, Operation.ALL):
                    return False
            elif b.operation == Operation.ALL or b.operation in implied:
                allowed = True
        return allowed

    def authorize_any(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some ALLOW binding could let ``principal`` perform ``operation`` on a resource of the type.

        Kafka's ``authorizeByResourceType`` (used e.g. to decide whether an idempotent producer without
        a transactional id may write): super users, or any allowing binding of the type not fully denied.
        """
        if not self.enabled or str(principal) in self.super_users:
            return True
        who = str(principal)
        implied = _IMPLIED_BY.get(operation, frozenset({operation}))
        for b in self._current():
            if b.resource_type != resource_type or b.permission != Permission.ALLOW:
                continue
            if b.principal not in (who, WILDCARD_PRINCIPAL) or b.host not in (WILDCARD, host):
                continue
            if b.operation == Operation.ALL or b.operation in implied:
                probe = b.resource_name if b.resource_name != WILDCARD else "\x00any"
                if self.authorize(principal, host, operation, resource_type, probe):
                    return True
        return False

    # -- management --------------------------------------------------------------------------------------

    def add(self, bindings: Sequence[AclBinding]) -> None:
        """Add bindings to ``_system/acls`` (visible to this broker at once, to others within a poll)."""
        self._store().add(bindings)
        self.refresh(force=True)

    def remove(self, flt: AclFilter, *more: AclFilter) -> list[AclBinding]:
        """Remove every binding any of the filters selects, in one commit; return the removed bindings."""
        filters = (flt, *more)
        removed = self._store().remove(lambda b: not any(f.matches(b) for f in filters))
        self.refresh(force=True)
        return removed

    def list(self, flt: AclFilter = _ANY) -> list[AclBinding]:
        """The bindings the filter selects, fresh from the table."""
        self.refresh(force=True)
        return [b for b in self._bindings if flt.matches(b)]

    # -- freshness ---------------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """Reload the bindings if the table's version moved (at most once per poll interval unless forced)."""
        if self._table is None:
            return
        now = time.monotonic()
        if not force and now - self._checked < self.poll_interval_s:
            return
        with self._lock:
            if not force and now - self._checked < self.poll_interval_s:
                return
            self._checked = now
            version = self._table.version()
            if version == self._version:
                return
            version, bindings = self._table.read()
            index: dict[tuple[str, ResourceType], list[AclBinding]] = {}
            for b in bindings:
                index.setdefault((b.principal, b.resource_type), []).append(b)
            self._index = {k: tuple(v) for k, v in index.items()}  # swapped whole: readers need no lock
            self._bindings, self._version = tuple(bindings), version
            logger.info("acls at version %d: %d bindings", version, len(bindings))

    def _current(self) -> tuple[AclBinding, ...]:
        if self._poller is None:
            try:
                self.refresh()
            except TopiclakeError as exc:  # keep the last known ACLs: failing closed on them is safe
                logger.warning("cannot refresh the ACLs: %s", exc.message)
        return self._bindings

    def _store(self) -> AclTable:
        if self._table is None:
            raise TopiclakeError("this authorizer has no ACL table (no warehouse)")
        return self._table

    def start(self) -> None:
        """Poll the table in a background thread, so that :meth:`authorize` never touches storage."""
        if self._poller is not None or self._table is None or not self.enabled:
            return
        self.refresh(force=True)
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll, name="acl-poller", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            try:
                self.refresh(force=True)
            except TopiclakeError as exc:
                logger.warning("cannot refresh the ACLs: %s", exc.message)

    def close(self) -> None:
        """Stop the background poll (if started)."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
            self._poller = None
