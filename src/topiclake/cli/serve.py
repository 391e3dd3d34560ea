"""``topiclake serve`` and ``topiclake version``."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

import topiclake
from topiclake.cli._app import app, configure_logging


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
        typer.Option(help="debug, info, warning or error (default info).", envvar="TOPICLAKE_LOG_LEVEL"),
    ] = None,
) -> None:
    """Run the gateway: one broker serving the HTTP API and the Kafka protocol over the warehouse."""
    import uvicorn

    from topiclake.api import create_app
    from topiclake.settings import GatewaySettings

    overrides: dict[str, object] = {
        k: v
        for k, v in {
            "warehouse": warehouse,
            "host": host,
            "port": port,
            "log_level": log_level,
            "kafka_port": kafka_port,
            "kafka_advertised_host": kafka_advertised_host,
            "kafka_advertised_port": kafka_advertised_port,
        }.items()
        if v is not None
    }
    settings = GatewaySettings(**overrides)  # type: ignore[arg-type]
    if broker_id is not None:
        settings = settings.model_copy(
            update={"broker": settings.broker.model_copy(update={"broker_id": broker_id})}
        )
    configure_logging(settings.log_level)
    logging.getLogger(__name__).info(
        "serving warehouse %s on http://%s:%d (docs at /docs)",
        settings.warehouse,
        settings.host,
        settings.port,
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)


@app.command()
def version() -> None:
    """Print the topiclake version."""
    typer.echo(topiclake.__version__)
