"""Kafka's ACL model: resource types, patterns, operations, permissions, bindings and filters."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar


class ResourceType(StrEnum):
    """What an ACL guards."""

    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


class PatternType(StrEnum):
    """How an ACL's resource name matches: the exact name (``*`` = every name) or a prefix."""

    LITERAL = "Literal"
    PREFIXED = "Prefixed"


class Operation(StrEnum):
    """What a principal does to a resource (Kafka's operations)."""

    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(StrEnum):
    """Whether an ACL allows or denies; a matching deny always wins."""

    ALLOW = "Allow"
    DENY = "Deny"


#: The name of the cluster resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: Literal resource name and principal name that match every resource / principal.
WILDCARD = "*"
#: The principal that matches every user.
WILDCARD_PRINCIPAL = "User:*"


_E = TypeVar("_E", bound=StrEnum)


def _enum_value(kind: type[_E], text: str) -> _E:
    """Parse an enum by value or name, case-insensitively (``read``, ``READ``, ``Read``)."""
    folded = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if member.value.lower() == folded or member.name.replace("_", "").lower() == folded:
            return member
    raise ValueError(f"unknown {kind.__name__} {text!r}: one of {', '.join(m.value for m in kind)}")


def parse_resource_type(text: str) -> ResourceType:
    """``topic``/``TOPIC``/``Topic`` -> :attr:`ResourceType.TOPIC` (ValueError when unknown)."""
    return _enum_value(ResourceType, text)


def parse_pattern_type(text: str) -> PatternType:
    """``literal``/``PREFIXED`` -> :class:`PatternType` (ValueError when unknown)."""
    return _enum_value(PatternType, text)


def parse_operation(text: str) -> Operation:
    """``read``/``DESCRIBE_CONFIGS``/``DescribeConfigs`` -> :class:`Operation` (ValueError when unknown)."""
    return _enum_value(Operation, text)


def parse_permission(text: str) -> Permission:
    """``allow``/``DENY`` -> :class:`Permission` (ValueError when unknown)."""
    return _enum_value(Permission, text)


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is ``permission``-ed to ``operation`` on a resource pattern."""

    principal: str
    host: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the resource ``name`` of ``resource_type``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, name)


@dataclass(frozen=True)
class AclFilter:
    """Selects bindings; ``None`` matches anything (Kafka's ANY).

    ``pattern_type=None`` is Kafka's ANY: a given ``resource_name`` must equal the binding's name exactly.
    ``match=True`` is Kafka's MATCH: ``resource_name`` is a concrete name and the filter selects every
    binding that applies to it (the literal name, the literal ``*``, prefixes of it).
    """

    principal: str | None = None
    host: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    operation: Operation | None = None
    permission: Permission | None = None
    match: bool = False

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` is selected by this filter."""
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.resource_type is not None and self.resource_type != binding.resource_type:
            return False
        if self.operation is not None and self.operation != binding.operation:
            return False
        if self.permission is not None and self.permission != binding.permission:
            return False
        if self.match:
            if self.resource_name is None:
                return True
            return binding.applies_to(binding.resource_type, self.resource_name)
        if self.pattern_type is not None and self.pattern_type != binding.pattern_type:
            return False
        return self.resource_name is None or self.resource_name == binding.resource_name
