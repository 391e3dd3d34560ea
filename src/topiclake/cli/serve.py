"""``topiclake serve`` and ``topiclake version``."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
from typing import Annotated

import typer

import topiclake
from topiclake.cli._app import app, configure_logging

GIL_SWITCH_INTERVAL_S = 0.0005
"""How often ``topiclake serve`` lets another thread take the GIL (Python's default is 0.005)."""


@app.command()
def serve(
    warehouse: Annotated[
        str | None,
        typer.Option(
            help="Warehouse URI: a local directory (default ./data), s3://, gs://, abfss://.",
            envvar="TOPICLAKE_WAREHOUSE",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default 127.0.0.1).", envvar="TOPICLAKE_HOST")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default 8082).", envvar="TOPICLAKE_PORT")
    ] = None,
    broker_id: Annotated[
        int | None, typer.Option(help="This broker's id (default 0).", envvar="TOPICLAKE_BROKER__BROKER_ID")
    ] = None,
    schema_registry_port: Annotated[
        int | None,
        typer.Option(
            help="Port of the schema registry (default 8081; 0 = off).",
            envvar="TOPICLAKE_SCHEMA_REGISTRY_PORT",
            show_default=False,
        ),
    ] = None,
    kafka_port: Annotated[
        int | None,
        typer.Option(
            help="Port of the Kafka protocol listener (default 9092; 0 turns it off).",
            envvar="TOPICLAKE_KAFKA_PORT",
        ),
    ] = None,
    kafka_advertised_host: Annotated[
        str | None,
        typer.Option(help="Host Kafka clients are told to use.", envvar="TOPICLAKE_KAFKA_ADVERTISED_HOST"),
    ] = None,
    kafka_advertised_port: Annotated[
        int | None,
        typer.Option(help="Port Kafka clients are told to use.", envvar="TOPICLAKE_KAFKA_ADVERTISED_PORT"),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="debug, info, warning or error (default info); debug also logs every HTTP request.",
            envvar="TOPICLAKE_LOG_LEVEL",
        ),
    ] = None,
    tls_cert: Annotated[
        str | None,
        typer.Option(help="PEM certificate: the listeners speak TLS.", envvar="TOPICLAKE_TLS_CERT"),
    ] = None,
    tls_key: Annotated[
        str | None, typer.Option(help="PEM private key of --tls-cert.", envvar="TOPICLAKE_TLS_KEY")
    ] = None,
    tls_ca: Annotated[
        str | None,
        typer.Option(
            help="PEM CA: client certificates signed by it are required (mTLS).", envvar="TOPICLAKE_TLS_CA"
        ),
    ] = None,
    tls_principal_mapping_rules: Annotated[
        str | None,
        typer.Option(
            help="Kafka's ssl.principal.mapping.rules for client certificates (default: the whole DN).",
            envvar="TOPICLAKE_TLS_PRINCIPAL_MAPPING_RULES",
        ),
    ] = None,
    kafka_sasl_mechanisms: Annotated[
        str | None,
        typer.Option(
            help="SASL mechanisms of the Kafka listener with --auth (default SCRAM-SHA-256,SCRAM-SHA-512, "
            "and PLAIN with TLS).",
            envvar="TOPICLAKE_KAFKA_SASL_MECHANISMS",
        ),
    ] = None,
    advertised_host: Annotated[
        str | None,
        typer.Option(
            help="Host name other brokers and clients are told to use (default: --host).",
            envvar="TOPICLAKE_ADVERTISED_HOST",
        ),
    ] = None,
    advertised_port: Annotated[
        int | None,
        typer.Option(
            help="Port clients are told to use (default: --port).", envvar="TOPICLAKE_ADVERTISED_PORT"
        ),
    ] = None,
    rack: Annotated[
        str | None,
        typer.Option(
            help="This broker's rack: reported in metadata; replicas spread over racks.",
            envvar="TOPICLAKE_BROKER__RACK",
        ),
    ] = None,
    # -- quotas per principal (docs/quotas.md; per user: `topiclake quotas`, in _system/quotas) -------------
    quota_produce_bytes_per_s: Annotated[
        float | None,
        typer.Option(
            help="Produce bytes/s per principal (0 = unlimited).",
            envvar="TOPICLAKE_QUOTA_PRODUCE_BYTES_PER_S",
        ),
    ] = None,
    quota_fetch_bytes_per_s: Annotated[
        float | None,
        typer.Option(
            help="Fetch bytes/s per principal (0 = unlimited).", envvar="TOPICLAKE_QUOTA_FETCH_BYTES_PER_S"
        ),
    ] = None,
    quota_request_rate: Annotated[
        float | None,
        typer.Option(help="Requests/s per principal (0 = unlimited).", envvar="TOPICLAKE_QUOTA_REQUEST_RATE"),
    ] = None,
    # -- security (docs/security.md) ------------------------------------------------------------------
    auth: Annotated[
        bool | None,
        typer.Option(
            "--auth/--no-auth",
            help="Require credentials and enforce the ACLs (default off: the broker is open).",
            envvar="TOPICLAKE_AUTH",
            show_default=False,
        ),
    ] = None,
    users_file: Annotated[
        str | None,
        typer.Option(help="htpasswd-format users file (bcrypt).", envvar="TOPICLAKE_USERS_FILE"),
    ] = None,
    super_users: Annotated[
        str | None,
        typer.Option(help="Allowed everything: User:admin,User:ops.", envvar="TOPICLAKE_SUPER_USERS"),
    ] = None,
    jwt_public_key_file: Annotated[
        str | None,
        typer.Option(help="PEM public key of RS256 bearer tokens.", envvar="TOPICLAKE_JWT_PUBLIC_KEY_FILE"),
    ] = None,
) -> None:
    """Run a broker: the HTTP API and the Kafka protocol over the warehouse. Brokers started on one warehouse
    with different --broker-id form one cluster: they elect a controller and share out the partitions'
    leadership."""
    import uvicorn

    from topiclake.api import create_app
    from topiclake.api.tls import scheme, uvicorn_tls_options
    from topiclake.settings import GatewaySettings

    overrides: dict[str, object] = {
        k: v
        for k, v in {
            "warehouse": warehouse,
            "host": host,
            "port": port,
            "log_level": log_level,
            "advertised_host": advertised_host,
            "advertised_port": advertised_port,
            "schema_registry_port": schema_registry_port,
            "kafka_port": kafka_port,
            "kafka_advertised_host": kafka_advertised_host,
            "kafka_advertised_port": kafka_advertised_port,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
            "tls_ca": tls_ca,
            "tls_principal_mapping_rules": tls_principal_mapping_rules,
            "kafka_sasl_mechanisms": kafka_sasl_mechanisms,
            "quota_produce_bytes_per_s": quota_produce_bytes_per_s,
            "quota_fetch_bytes_per_s": quota_fetch_bytes_per_s,
            "quota_request_rate": quota_request_rate,
            "auth": auth,
            "users_file": users_file,
            "super_users": super_users,
            "jwt_public_key_file": jwt_public_key_file,
        }.items()
        if v is not None
    }
    from pydantic import ValidationError

    from topiclake.settings_rules import invalid_settings

    broker_changes: dict[str, object] = {"broker_id": broker_id, "rack": rack}
    broker_changes = {k: v for k, v in broker_changes.items() if v is not None}
    try:  # refused settings: exit 1 with `InvalidSettings: <field>: <why>`, no traceback
        settings = GatewaySettings(**overrides)  # type: ignore[arg-type]
        if broker_changes:
            broker = settings.broker.model_validate({**settings.broker.model_dump(), **broker_changes})
            settings = GatewaySettings.model_validate({**settings.model_dump(), "broker": broker})
    except ValidationError as exc:
        raise invalid_settings(exc) from None
    configure_logging(settings.log_level)
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints every thread's stack to stderr
    # GIL hand-offs every 0.5 ms, not 5: a Delta commit re-takes the GIL several times and, behind a busy
    # Python thread, waited 5 ms each time (docs/kafka-protocol.md, "Throughput"; docs/decisions.md)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # an Arrow pool that gives freed memory back: the broker's RSS follows what it holds, not its peak
    # (docs/decisions.md, "Broker memory: an Arrow pool that gives memory back")
    from topiclake.process.memory import choose_arrow_pool, trim_heap_periodically

    choose_arrow_pool()
    trim_heap_periodically()  # and glibc's heap its free pages (Python's, orjson's, the Kafka codec's)
    from topiclake.platform import Storage

    # a wrong endpoint, bucket or key: one line and exit 1 (StorageError), before uvicorn or delta-rs run
    storage = Storage(settings.warehouse, settings.storage_options, fsync=settings.broker.fsync)
    storage.check_access()
    storage.verify_commit_safety()
    logging.getLogger(__name__).info(
        "serving warehouse %s on %s://%s:%d (docs at /docs)",
        settings.warehouse,
        scheme(settings),
        settings.host,
        settings.port,
    )
    if settings.cluster:  # refuse a broker id a live broker holds before anything starts
        from topiclake.platform.cluster.membership import Membership

        wait_s = 2.5 * settings.broker.heartbeat_interval_ms / 1000
        Membership(storage, settings.broker.broker_id, settings.broker.session_timeout_ms).check_free(wait_s)
    if settings.schema_registry_port:
        from topiclake.cli._serve_registry import serve_with_registry

        serve_with_registry(settings)
        return
    from topiclake.cli._graceful import GracefulServer

    gateway = create_app(settings)
    server = GracefulServer(
        uvicorn.Config(
            gateway,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            # one access line per request only at debug: uvicorn formats its arguments for every response
            # even when the level drops the line (~3 % of a one-record produce's CPU)
            access_log=settings.log_level == "debug",
            timeout_keep_alive=settings.keep_alive_s,
            **uvicorn_tls_options(settings),
        )
    )
    server.run()  # a SIGTERM/Ctrl+C stop returns here after a graceful shutdown: exit 0
    if not server.started:
        error = getattr(gateway.state, "startup_error", None)
        if error is not None:  # e.g. BrokerIdInUse: exit 1 with its message, like every other command
            raise error from None
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE (e.g. the port is taken)


@app.command()
def version() -> None:
    """Print the topiclake version."""
    typer.echo(topiclake.__version__)
