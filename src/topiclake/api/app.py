"""The FastAPI gateway: app factory and lifespan (the broker is made and closed there)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import topiclake
from topiclake.api import errors
from topiclake.api.consumer_instances import ConsumerInstanceManager
from topiclake.api.deps import advertised
from topiclake.api.metrics import GatewayMetrics, RequestCounter
from topiclake.api.routes import (
    health,
    native_groups,
    native_records,
    native_topics,
    rest_v2,
    rest_v2_consumers,
    rest_v3,
    rest_v3_groups,
)
from topiclake.platform import Broker, Storage
from topiclake.platform.cluster import Endpoint
from topiclake.settings import GatewaySettings

logger = logging.getLogger(__name__)

_DESCRIPTION = """
topiclake: Kafka-style topics whose partitions are Delta Lake tables. An `acks=all` answer means the record
is already in the topic's Delta table, visible to every reader and to SQL.

* **Native API** (`/v1`): topics, produce (JSON, base64, NDJSON stream, Arrow IPC), fetch with long-poll,
  offsets, metadata. Errors: `{"error": {"code", "message", "retriable", "details"}}`.
* **Kafka REST Proxy API** (Confluent v2 at `/topics`, `/brokers`; v3 at `/v3/clusters`): existing REST
  Proxy clients work unchanged. Errors: `{"error_code", "message"}`.
"""


def create_app(settings: GatewaySettings | None = None, broker: Broker | None = None) -> FastAPI:
    """Build the gateway app.

    Args:
        settings: Gateway settings (from the environment when omitted).
        broker: An already-open broker to serve (tests); by default one is opened in the lifespan over
            ``settings.warehouse`` and closed, committing what is pending, on shutdown.
    """
    settings = settings or GatewaySettings()
    metrics = GatewayMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = broker is None
        if broker is None:
            storage = Storage(settings.warehouse, settings.storage_options, fsync=settings.broker.fsync)
            app.state.broker = Broker(storage, settings.broker)
        else:
            app.state.broker = broker
        metrics.broker = app.state.broker
        host, port = advertised(settings)
        app.state.broker.advertise(Endpoint("http", host, port))
        app.state.groups = app.state.broker.groups
        app.state.consumer_instances = ConsumerInstanceManager(
            app.state.broker,
            app.state.groups,
            instance_timeout_ms=settings.consumer_instance_timeout_ms,
            request_timeout_ms=settings.consumer_request_timeout_ms,
        )
        kafka = None
        if settings.kafka_port:
            from topiclake.kafka import KafkaListener

            kafka = KafkaListener(
                app.state.broker,
                settings.host,
                settings.kafka_port,
                settings.kafka_advertised_host or settings.advertised_host,
                settings.kafka_advertised_port,
                settings.max_request_bytes,
            )
            try:
                await kafka.start()
            except Exception:
                app.state.consumer_instances.close()
                if own:
                    app.state.broker.close()
                raise
        app.state.kafka = kafka
        logger.info(
            "topiclake %s broker %d ready on warehouse %s",
            topiclake.__version__,
            app.state.broker.config.broker_id,
            app.state.broker.storage.root,
        )
        try:
            yield
        finally:
            if kafka is not None:
                await kafka.close()
            app.state.consumer_instances.close()  # instances commit (with auto commit) and leave
            if own:
                app.state.broker.close()

    app = FastAPI(
        title="topiclake",
        version=topiclake.__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    errors.install(app)
    app.add_middleware(RequestCounter, metrics=metrics)
    for module in (
        health,
        native_topics,
        native_records,
        native_groups,
        rest_v2,
        rest_v2_consumers,
        rest_v3,
        rest_v3_groups,
    ):
        app.include_router(module.router)
    return app
