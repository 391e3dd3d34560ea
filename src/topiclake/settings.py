"""Settings of the deployables, read from the environment (prefix ``TOPICLAKE_``, nesting with ``__``).

Example: ``TOPICLAKE_WAREHOUSE=s3://bucket/lake TOPICLAKE_BROKER__LINGER_MS=5 topiclake serve``.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from topiclake.platform.config import BrokerConfig


class GatewaySettings(BaseSettings):
    """Settings of the gateway process (one broker)."""

    model_config = SettingsConfigDict(
        env_prefix="TOPICLAKE_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    warehouse: str = Field(
        "./data", description="Warehouse URI: a local directory, s3://, gs:// or abfss://."
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict, description="Options for the object store (credentials, endpoint, region)."
    )
    count_object_store_requests: bool = Field(
        False,
        description="Run a counting proxy in front of the warehouse's plain-HTTP S3 endpoint and export "
        "topiclake_object_store_requests_total{op} on /metrics (docs/object-storage.md).",
    )
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8082, ge=0, le=65535, description="Port the gateway listens on (the REST Proxy's).")
    schema_registry_port: int = Field(
        8081, ge=0, le=65535, description="Port of the schema registry listener (Confluent's 8081); 0 = off."
    )
    advertised_host: str | None = Field(
        None, description="Host name clients are told to use for this broker (default: host)."
    )
    advertised_port: int | None = Field(None, ge=1, le=65535, description="Port clients are told to use.")
    gc_freeze: bool = Field(
        True,
        description="Freeze the objects alive once the gateway has started out of the garbage collector "
        "(gc.freeze): full collections then skip them and stop pausing requests for 100+ ms "
        "(docs/producing.md, the hot path).",
    )
    keep_alive_s: int = Field(
        65,
        ge=1,
        le=3600,
        description="Seconds an idle HTTP keep-alive connection stays open. Longer than clients' and load "
        "balancers' own idle limits (httpx 5 s, AWS ALB 60 s), so the server never closes a connection at "
        "the moment a client sends on it again (uvicorn's default, 5 s, met httpx's exactly).",
    )
    max_request_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 beyond it)."
    )
    consumer_instance_timeout_ms: int = Field(
        300_000,
        ge=100,
        description="A REST Proxy consumer instance idle this long is removed from its group.",
    )
    consumer_request_timeout_ms: int = Field(
        1_000, ge=0, description="Longest wait of a REST Proxy consumer read when no record is there."
    )
    kafka_port: int = Field(
        9092, ge=0, le=65535, description="Port of the Kafka protocol listener (0 turns it off)."
    )
    kafka_advertised_host: str | None = Field(
        None, description="Host Kafka clients are told to use for this broker (default: host)."
    )
    kafka_advertised_port: int | None = Field(
        None, ge=1, le=65535, description="Port Kafka clients are told to use (default: kafka_port)."
    )
    tls_cert: str | None = Field(
        None, description="PEM certificate (chain) file: HTTP and Kafka listeners speak TLS."
    )
    tls_key: str | None = Field(None, description="PEM private key file of tls_cert.")
    tls_ca: str | None = Field(
        None,
        description="PEM CA file: client certificates signed by it are REQUIRED (mTLS); their subject is "
        "the principal. Brokers also verify each other with it.",
    )
    tls_principal_mapping_rules: str = Field(
        "DEFAULT",
        description="Kafka's ssl.principal.mapping.rules for client certificates: DEFAULT (the whole DN) "
        "and/or RULE:pattern/replacement/[L|U], comma-separated, first match wins.",
    )
    kafka_sasl_mechanisms: str | None = Field(
        None,
        description="Comma-separated SASL mechanisms of the Kafka listener when auth is on (default "
        "SCRAM-SHA-256,SCRAM-SHA-512 and, with TLS, PLAIN; listing PLAIN without TLS allows it over plain "
        "text, as a SASL_PLAINTEXT listener in Kafka).",
    )
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    cluster: bool = Field(
        True,
        description="Join the cluster of brokers over this warehouse (heartbeats, controller election, "
        "partition leaders). Off: this process leads every partition alone, as a library Broker does.",
    )
    broker: BrokerConfig = Field(default_factory=BrokerConfig, description="Broker id and tuning.")
    console_sample_ms: int = Field(
        10_000, ge=100, description="How often the web console (/ui) samples rates and lag for its charts."
    )
    console_object_scan_ms: int = Field(
        60_000,
        ge=100,
        description="On object storage, how often the web console scans the topics' Delta histories for "
        "jobs and the offsets table's log for other processes' commits (a LIST each, billed).",
    )
    # -- security (docs/security.md) -----------------------------------------------------------------------
    auth: bool = Field(
        False,
        description="Require authentication (HTTP Basic, JWT bearer, TLS client certificate) and enforce "
        "the ACLs in _system/acls. Off: the broker is open to anyone who reaches it (logged loudly).",
    )
    users_file: str | None = Field(
        None, description="htpasswd-format users file (bcrypt; `topiclake users add` or `htpasswd -B`)."
    )
    super_users: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Principals allowed everything, comma-separated (User:admin,User:ops): super.users.",
    )
    jwt_secret: SecretStr | None = Field(None, description="HS256 secret of JWT bearer tokens.")
    jwt_public_key_file: str | None = Field(
        None, description="PEM file of the RS256 public key of JWT bearer tokens."
    )
    jwt_issuer: str | None = Field(None, description="Required `iss` of JWT bearer tokens, when set.")
    jwt_audience: str | None = Field(None, description="Required `aud` of JWT bearer tokens, when set.")
    # -- quotas per principal (docs/quotas.md; 0 = unlimited) ------------------------------------------------
    quota_produce_bytes_per_s: float = Field(
        0, ge=0, description="Produce bytes/s per principal (Kafka's producer_byte_rate); 0 = unlimited."
    )
    quota_fetch_bytes_per_s: float = Field(
        0, ge=0, description="Fetch bytes/s per principal (Kafka's consumer_byte_rate); 0 = unlimited."
    )
    quota_request_rate: float = Field(0, ge=0, description="Requests/s per principal; 0 = unlimited.")
    quota_overrides: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Deprecated (use `topiclake quotas set` or AlterClientQuotas: _system/quotas). "
        'Per-principal quotas, JSON: {"User:alice": {"produce_bytes_per_s": 1048576}}; the kinds an override '
        "omits keep the defaults.",
    )

    @field_validator("super_users", mode="before")
    @classmethod
    def _split_super_users(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
        return value

    @model_validator(mode="after")
    def _refuse_breaking_combinations(self) -> Self:
        """Refuse settings that would break the broker, with the reason (``topiclake.settings_rules``)."""
        from topiclake.settings_rules import gateway_problems

        problems = gateway_problems(self)
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append("tls_cert and tls_key go together: give both (or neither)")
        if self.tls_ca and not self.tls_cert:
            problems.append("tls_ca (client certificates required) needs tls_cert and tls_key")
        known = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        unknown = [
            m for m in (self.kafka_sasl_mechanisms or "").upper().split(",") if m.strip() not in ("", *known)
        ]
        if unknown:
            problems.append(f"kafka_sasl_mechanisms: unknown {unknown}; choose from {', '.join(known)}")
        if self.tls_principal_mapping_rules.strip() != "DEFAULT":
            from topiclake.security.tls import PrincipalMapper

            try:
                PrincipalMapper(self.tls_principal_mapping_rules)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self
