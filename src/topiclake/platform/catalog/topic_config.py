"""Topic names and topic configs, with Kafka's rules, names and defaults.

A topic name becomes a directory of the warehouse, so it is validated here, once, before it reaches any
path: Kafka's rule (``[a-zA-Z0-9._-]``, 1 to 249 characters, not ``.`` or ``..``) leaves no room for a
separator, a parent reference or a character a filesystem or object store would treat specially.

Topic configs use Kafka's names on the outside (``retention.ms``) and typed fields inside
(:attr:`TopicConfig.retention_ms`). Only the overrides of a topic are stored; the defaults are Kafka's.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from topiclake.errors import InvalidConfig, InvalidTopicName

logger = logging.getLogger(__name__)

__all__ = [
    "CONFIG_DOCS",
    "CONFIG_NAMES",
    "DEFAULTS",
    "MAX_TOPIC_NAME_LENGTH",
    "TopicConfig",
    "validate_topic_name",
]

#: Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``).
MAX_TOPIC_NAME_LENGTH: Final = 249

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_NAME_RULE = (
    "a topic name is 1 to 249 characters from [a-zA-Z0-9._-] (ASCII letters, digits, '.', '_', '-') "
    "and is not '.' or '..'"
)


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it is a legal Kafka topic name.

    Args:
        name: The proposed topic name.

    Returns:
        The name, unchanged.

    Raises:
        InvalidTopicName: The name is empty, longer than 249 characters, ``.`` or ``..``, or holds a
            character outside ``[a-zA-Z0-9._-]``.
    """
    if not isinstance(name, str):
        raise InvalidTopicName(f"invalid topic name {name!r}: {_NAME_RULE}")
    if (
        not name
        or len(name) > MAX_TOPIC_NAME_LENGTH
        or name in (".", "..")
        or not _TOPIC_NAME.fullmatch(name)
    ):
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise InvalidTopicName(f"invalid topic name {shown!r}: {_NAME_RULE}", topic=shown)
    return name


_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1

_POLICY_DELETE = "delete"
_POLICY_COMPACT = "compact"
_TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class _Spec:
    field: str
    kind: str  # "long", "int", "policy", "timestamp_type", "bool"
    minimum: int
    doc: str


_SPECS: Final[dict[str, _Spec]] = {
    "retention.ms": _Spec(
        "retention_ms",
        "long",
        -1,
        "How long records are kept before retention may delete them, in ms; -1 keeps them forever.",
    ),
    "retention.bytes": _Spec(
        "retention_bytes",
        "long",
        -1,
        "Largest size a partition may grow to before retention deletes its oldest segments; -1: no limit.",
    ),
    "cleanup.policy": _Spec(
        "cleanup_policy",
        "policy",
        0,
        "'delete' (retention by time/size), 'compact' (keep the latest value per key) or 'compact,delete'.",
    ),
    "delete.retention.ms": _Spec(
        "delete_retention_ms",
        "long",
        0,
        "How long a tombstone (null value) is kept after key compaction has reached it, in ms.",
    ),
    "min.compaction.lag.ms": _Spec(
        "min_compaction_lag_ms",
        "long",
        0,
        "Minimum age of a record, in ms, before key compaction may drop it.",
    ),
    "max.message.bytes": _Spec(
        "max_message_bytes",
        "int",
        0,
        "Largest record batch the topic accepts, in bytes; larger records are rejected.",
    ),
    "message.timestamp.type": _Spec(
        "message_timestamp_type",
        "timestamp_type",
        0,
        "'CreateTime' keeps the producer's timestamp; 'LogAppendTime' stamps records when appended.",
    ),
    "segment.ms": _Spec(
        "segment_ms",
        "long",
        1,
        "Time after which the live segment is sealed and a new one started, in ms.",
    ),
    "segment.bytes": _Spec(
        "segment_bytes",
        "int",
        14,
        "Size at which the live segment is sealed and a new one started, in bytes (at least 14).",
    ),
    "min.insync.replicas": _Spec(
        "min_insync_replicas",
        "int",
        1,
        "Replicas that must acknowledge an acks=all write; accepted for Kafka compatibility.",
    ),
    "replication.factor": _Spec(
        "replication_factor",
        "int",
        1,
        "Copies of each partition; accepted and reported only (durability comes from the storage).",
    ),
    "confluent.value.schema.validation": _Spec(
        "confluent_value_schema_validation",
        "bool",
        0,
        "'true': refuse records whose value is not framed with a schema id the schema registry knows.",
    ),
    "confluent.key.schema.validation": _Spec(
        "confluent_key_schema_validation",
        "bool",
        0,
        "'true': refuse records whose key is not framed with a schema id the schema registry knows.",
    ),
}

_FIELD_TO_NAME: Final[dict[str, str]] = {spec.field: name for name, spec in _SPECS.items()}

#: Every topic config name, in Kafka's spelling.
CONFIG_NAMES: Final[tuple[str, ...]] = tuple(_SPECS)

#: One line per config, for the HTTP API and ``--help``.
CONFIG_DOCS: Final[dict[str, str]] = {name: spec.doc for name, spec in _SPECS.items()}


def _allowed() -> str:
    return ", ".join(sorted(_SPECS))


def _parse_int(name: str, value: object, spec: _Spec) -> int:
    if isinstance(value, bool):
        raise InvalidConfig(f"{name} must be an integer, got {value!r}", config=name, value=str(value))
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise InvalidConfig(f"{name} must be an integer, got {value!r}", config=name, value=value)
        number = int(text)
    else:
        raise InvalidConfig(f"{name} must be an integer, got {value!r}", config=name, value=repr(value))
    upper = _INT32_MAX if spec.kind == "int" else _INT64_MAX
    if number < spec.minimum or number > upper:
        raise InvalidConfig(
            f"{name} must be between {spec.minimum} and {upper}, got {number}", config=name, value=str(number)
        )
    return number


def _parse_policy(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidConfig(
            f"{name} must be 'delete', 'compact' or 'compact,delete', got {value!r}", config=name
        )
    parts = {part.strip() for part in value.split(",")}
    if not parts or not parts <= {_POLICY_DELETE, _POLICY_COMPACT}:
        raise InvalidConfig(
            f"{name} must be 'delete', 'compact' or 'compact,delete', got {value!r}", config=name, value=value
        )
    if parts == {_POLICY_DELETE, _POLICY_COMPACT}:
        return "compact,delete"
    return parts.pop()


def _parse_timestamp_type(name: str, value: object) -> str:
    if value not in _TIMESTAMP_TYPES:
        raise InvalidConfig(
            f"{name} must be 'CreateTime' or 'LogAppendTime', got {value!r}", config=name, value=str(value)
        )
    return str(value)


def _parse_bool(name: str, value: object) -> str:
    text = str(value).lower() if isinstance(value, (str, bool)) else ""
    if text not in ("true", "false"):
        raise InvalidConfig(f"{name} must be 'true' or 'false', got {value!r}", config=name, value=str(value))
    return text


def _parse(name: str, value: object) -> Any:
    spec = _SPECS.get(name)
    if spec is None:
        raise InvalidConfig(f"unknown topic config {name!r}; allowed: {_allowed()}", config=name)
    if spec.kind == "bool":
        return _parse_bool(name, value)
    if spec.kind == "policy":
        return _parse_policy(name, value)
    if spec.kind == "timestamp_type":
        return _parse_timestamp_type(name, value)
    return _parse_int(name, value, spec)


@dataclass(frozen=True)
class TopicConfig:
    """The configs of one topic, typed, with Kafka's defaults.

    Build one from Kafka names with :meth:`from_kafka`; construct it directly with field names in code.
    Every value is validated on construction, and ``cleanup_policy`` is normalised (``delete,compact``
    becomes ``compact,delete``).

    Attributes:
        retention_ms: ``retention.ms``; -1 keeps records forever.
        retention_bytes: ``retention.bytes``; -1 means no size limit.
        cleanup_policy: ``cleanup.policy``: ``delete``, ``compact`` or ``compact,delete``.
        delete_retention_ms: ``delete.retention.ms``.
        min_compaction_lag_ms: ``min.compaction.lag.ms``.
        max_message_bytes: ``max.message.bytes``.
        message_timestamp_type: ``message.timestamp.type``: ``CreateTime`` or ``LogAppendTime``.
        segment_ms: ``segment.ms``.
        segment_bytes: ``segment.bytes`` (at least 14, as in Kafka).
        min_insync_replicas: ``min.insync.replicas``.
        replication_factor: ``replication.factor``; accepted and reported only.
        confluent_value_schema_validation: ``confluent.value.schema.validation`` (``true``/``false``).
        confluent_key_schema_validation: ``confluent.key.schema.validation`` (``true``/``false``).
    """

    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    segment_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    min_insync_replicas: int = 1
    replication_factor: int = 1
    confluent_value_schema_validation: str = "false"
    confluent_key_schema_validation: str = "false"

    def __post_init__(self) -> None:
        for name, spec in _SPECS.items():
            value = getattr(self, spec.field)
            parsed = _parse(name, value)
            if parsed != value or type(parsed) is not type(value):
                object.__setattr__(self, spec.field, parsed)

    @classmethod
    def from_kafka(cls, overrides: Mapping[str, str | int] | None = None) -> TopicConfig:
        """Build a config from Kafka-named overrides; everything not given keeps Kafka's default.

        Args:
            overrides: Config name to value, e.g. ``{"retention.ms": "3600000"}``; values may be strings
                or integers.

        Returns:
            The validated config.

        Raises:
            InvalidConfig: A name is unknown or a value is not allowed.
        """
        fields: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            fields[_SPECS[name].field if name in _SPECS else name] = _parse(name, value)
        return cls(**fields)

    def to_kafka(self) -> dict[str, str]:
        """Return every config under its Kafka name, values as strings."""
        return {name: str(getattr(self, spec.field)) for name, spec in _SPECS.items()}

    def overrides(self) -> dict[str, str]:
        """Return only the configs that differ from Kafka's defaults, under their Kafka names."""
        return {name: value for name, value in self.to_kafka().items() if DEFAULTS[name] != value}

    def get(self, name: str) -> str:
        """Return one config by its Kafka name, as a string.

        Raises:
            InvalidConfig: The name is unknown.
        """
        spec = _SPECS.get(name)
        if spec is None:
            raise InvalidConfig(f"unknown topic config {name!r}; allowed: {_allowed()}", config=name)
        return str(getattr(self, spec.field))

    def with_changes(
        self, set: Mapping[str, str | int] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        """Return a copy with some configs set and others reset to their defaults (Kafka's incremental alter).

        Args:
            set: Kafka-named configs to set.
            delete: Kafka names of configs to reset to their defaults.

        Returns:
            The new config; this one is unchanged.

        Raises:
            InvalidConfig: A name is unknown, a value is not allowed, or a name is both set and deleted.
        """
        to_set = dict(set or {})
        to_delete = list(delete)
        for name in to_delete:
            if name not in _SPECS:
                raise InvalidConfig(f"unknown topic config {name!r}; allowed: {_allowed()}", config=name)
            if name in to_set:
                raise InvalidConfig(f"topic config {name!r} cannot be both set and deleted", config=name)
        changes: dict[str, Any] = {}
        for name, value in to_set.items():
            if name not in _SPECS:
                raise InvalidConfig(f"unknown topic config {name!r}; allowed: {_allowed()}", config=name)
            changes[_SPECS[name].field] = _parse(name, value)
        for name in to_delete:
            changes[_SPECS[name].field] = _DEFAULT_VALUES[_SPECS[name].field]
        return dataclasses.replace(self, **changes)

    @property
    def validates_schemas(self) -> bool:
        """Whether keys or values must carry a registered schema id (Confluent's schema validation)."""
        return "true" in (self.confluent_value_schema_validation, self.confluent_key_schema_validation)

    @property
    def is_compacted(self) -> bool:
        """Whether key compaction applies (``cleanup.policy`` holds ``compact``)."""
        return _POLICY_COMPACT in self.cleanup_policy.split(",")

    @property
    def is_deleting(self) -> bool:
        """Whether retention by time and size applies (``cleanup.policy`` holds ``delete``)."""
        return _POLICY_DELETE in self.cleanup_policy.split(",")


_DEFAULT_VALUES: Final[dict[str, Any]] = {f.name: f.default for f in dataclasses.fields(TopicConfig)}

#: Kafka's default of every topic config, under its Kafka name, as a string.
DEFAULTS: Final[dict[str, str]] = TopicConfig().to_kafka()
