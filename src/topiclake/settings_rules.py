"""Settings that would break a running broker, refused when the settings are made (``topiclake serve``).

Each rule names the settings and why the combination fails, e.g. a Delta log window under a second makes
the broker's own commits fail with "file not found" under load (the table's ``delta.logRetentionDuration``
has whole seconds). :class:`topiclake.platform.BrokerConfig` itself accepts such values, so that tests and
benchmarks can provoke them; the deployable's settings (:class:`topiclake.settings.GatewaySettings`) run
:func:`gateway_problems` in a validator.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import ValidationError

from topiclake.errors import InvalidSettings
from topiclake.platform.config import BrokerConfig

#: Shortest Delta log window a serving broker accepts.
MIN_LOG_RETENTION_MS = 1_000


class GatewayFields(Protocol):
    """What the rules read of :class:`topiclake.settings.GatewaySettings` (a protocol, so that the settings,
    which run the rules in a validator, and the rules do not import each other)."""

    @property
    def broker(self) -> BrokerConfig: ...
    @property
    def cluster(self) -> bool: ...
    @property
    def consumer_request_timeout_ms(self) -> int: ...
    @property
    def consumer_instance_timeout_ms(self) -> int: ...
    @property
    def port(self) -> int: ...
    @property
    def kafka_port(self) -> int: ...
    @property
    def schema_registry_port(self) -> int: ...


def gateway_problems(s: GatewayFields) -> list[str]:
    """Every reason these settings would break a serving broker (empty: fine)."""
    b = s.broker
    out: list[str] = []
    if b.log_retention_ms < MIN_LOG_RETENTION_MS:
        out.append(
            f"broker.log_retention_ms={b.log_retention_ms} is under {MIN_LOG_RETENTION_MS} ms: the broker "
            "would delete Delta log entries its own commits and readers still need ('file not found' "
            "under load); the Delta property has whole seconds"
        )
    if b.linger_ms >= b.request_timeout_ms:
        out.append(
            f"broker.linger_ms={b.linger_ms:g} must be below broker.request_timeout_ms="
            f"{b.request_timeout_ms}: every acks=all produce would time out before its flush"
        )
    if b.maintenance and b.maintenance_interval_ms >= b.log_retention_ms:
        out.append(
            f"broker.maintenance_interval_ms={b.maintenance_interval_ms} must be below "
            f"broker.log_retention_ms={b.log_retention_ms}: log cleanup could not keep the window"
        )
    if s.cluster and b.session_timeout_ms < 2 * b.heartbeat_interval_ms:
        out.append(
            f"broker.session_timeout_ms={b.session_timeout_ms} must be at least twice "
            f"broker.heartbeat_interval_ms={b.heartbeat_interval_ms}: live brokers would be declared "
            "dead between two heartbeats and their partitions would change leader over and over"
        )
    if s.cluster and b.forward_timeout_ms <= b.session_timeout_ms:
        out.append(
            f"broker.forward_timeout_ms={b.forward_timeout_ms} must exceed broker.session_timeout_ms="
            f"{b.session_timeout_ms}: a request for a dead leader's partition would fail before a new "
            "leader can be elected"
        )
    if s.consumer_request_timeout_ms >= s.consumer_instance_timeout_ms:
        out.append(
            f"consumer_request_timeout_ms={s.consumer_request_timeout_ms} must be below "
            f"consumer_instance_timeout_ms={s.consumer_instance_timeout_ms}: a consumer waiting for "
            "records would be removed from its group while it waits"
        )
    ports = {"port": s.port, "kafka_port": s.kafka_port, "schema_registry_port": s.schema_registry_port}
    used: dict[int, str] = {}
    for name, port in ports.items():
        if port and port in used:
            out.append(f"{name}={port} is also {used[port]}: two listeners cannot share a port")
        elif port:
            used[port] = name
    return out


def invalid_settings(exc: ValidationError, title: str = "settings") -> InvalidSettings:
    """One :class:`InvalidSettings` naming every field pydantic refused and why, without internals."""
    reasons = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        reasons.append(f"{where}: {message}" if where else message)
    return InvalidSettings(f"{title} refused: " + "; ".join(reasons))
