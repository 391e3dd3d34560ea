"""The FastAPI gateway: app factory and lifespan (the broker is made and closed there)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

import topiclake
from topiclake import console
from topiclake.api import errors, gc_pauses, openapi_links
from topiclake.api.auth import AuthMiddleware
from topiclake.api.auth.access import access_of, make_security
from topiclake.api.consumer_instances import ConsumerInstanceManager
from topiclake.api.deps import advertised
from topiclake.api.fast_produce import FastProduce, front_door
from topiclake.api.forwarding import ClusterRouting, HttpForwarder
from topiclake.api.metrics import GatewayMetrics, RequestCounter
from topiclake.api.quota_limit import QuotaLimit
from topiclake.api.routes import (
    group_members,
    health,
    native_groups,
    native_records,
    native_topics,
    rest_v2,
    rest_v2_consumers,
    rest_v3,
    rest_v3_acls,
    rest_v3_groups,
)
from topiclake.api.tls import broker_client_context, listener_context, principal_mapper
from topiclake.errors import TopiclakeError
from topiclake.objectstore import counting_endpoint
from topiclake.platform import Broker, Storage
from topiclake.platform.cluster import Endpoint
from topiclake.schema_registry import SchemaRegistry, serde
from topiclake.security.quota_store import QuotaStore
from topiclake.security.quotas import quotas_from_settings
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


class Gateway(FastAPI):
    """The FastAPI app, entered through :func:`~topiclake.api.fast_produce.front_door`: the common produce
    request is served before the middleware when none of it applies."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._front = front_door(self, super().__call__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._front(scope, receive, send)


def create_app(
    settings: GatewaySettings | None = None,
    broker: Broker | None = None,
    schema_registry: SchemaRegistry | None = None,
) -> Gateway:
    """Build the gateway app.

    Args:
        settings: Gateway settings (from the environment when omitted).
        broker: An already-open broker to serve (tests); by default one is opened in the lifespan over
            ``settings.warehouse`` and closed, committing what is pending, on shutdown.
        schema_registry: The registry that ``topiclake serve`` also serves on ``schema_registry_port``
            (then advertised as this broker's ``schema_registry`` listener); by default the REST Proxy's
            schema formats use a registry of their own over the broker's warehouse.
    """
    settings = settings or GatewaySettings()
    metrics = GatewayMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = broker is None
        forwarder: HttpForwarder | None = None
        if broker is None:
            options = settings.storage_options
            if settings.count_object_store_requests:
                metrics.object_store, options = counting_endpoint(options)
            storage = Storage(settings.warehouse, options, fsync=settings.broker.fsync)
            if settings.cluster:
                forwarder = HttpForwarder(settings.broker.broker_id, tls=broker_client_context(settings))
            app.state.broker = Broker(storage, settings.broker, forwarder=forwarder)
        else:
            app.state.broker = broker
        metrics.broker = app.state.broker
        app.state.security = make_security(settings, app.state.broker.storage)  # docs/security.md
        app.state.quota_store = QuotaStore(app.state.broker.storage, app.state.quotas)  # docs/quotas.md
        if forwarder is not None:
            forwarder.signer = app.state.security.signer
        host, port = advertised(settings)
        app.state.broker.advertise(Endpoint("http", host, port))
        app.state.schema_registry = schema_registry or SchemaRegistry(app.state.broker.storage)
        app.state.broker.schema_check = functools.partial(serde.check_records, app.state.schema_registry)
        if schema_registry is not None and settings.schema_registry_port:
            app.state.broker.advertise(Endpoint("schema_registry", host, settings.schema_registry_port))
        if own and settings.cluster:
            try:
                app.state.broker.join_cluster()
            except TopiclakeError as exc:
                logger.error("%s: %s", type(exc).__name__, exc.message)
                app.state.startup_error = exc
                app.state.broker.close()
                raise
        app.state.groups = app.state.broker.groups
        app.state.consumer_instances = ConsumerInstanceManager(
            app.state.broker,
            app.state.groups,
            instance_timeout_ms=settings.consumer_instance_timeout_ms,
            request_timeout_ms=settings.consumer_request_timeout_ms,
        )
        app.state.quota_store.start()  # _system/quotas applied now, re-read when it moves
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
                tls=listener_context(settings),
                principal_mapper=principal_mapper(settings),
                security=app.state.security,
                sasl_mechanisms=settings.kafka_sasl_mechanisms,
                quotas=app.state.quotas,
                quota_store=app.state.quota_store,
            )
            try:
                await kafka.start()
            except Exception:
                app.state.quota_store.close()
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
        if settings.gc_freeze:
            gc_pauses.settle()  # full GC pauses were the p99 tail (docs/producing.md, the hot path)
        try:
            yield
        finally:
            if kafka is not None:
                await kafka.close()
            app.state.consumer_instances.close()  # instances commit (with auto commit) and leave
            if own:
                app.state.broker.close()
            if forwarder is not None:
                forwarder.close()
            if metrics.object_store is not None:
                metrics.object_store.stop()
            app.state.security.close()
            app.state.quota_store.close()

    app = Gateway(
        title="topiclake",
        version=topiclake.__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    errors.install(app)
    app.add_middleware(FastProduce)  # innermost, when the front door cannot serve (auth on, quotas)
    app.state.quotas = quotas_from_settings(
        settings.quota_produce_bytes_per_s,
        settings.quota_fetch_bytes_per_s,
        settings.quota_request_rate,
        settings.quota_overrides,
    )
    app.add_middleware(QuotaLimit, quotas=app.state.quotas)  # inside auth: knows the principal (quotas.md)
    app.add_middleware(RequestCounter, metrics=metrics)
    app.add_middleware(ClusterRouting, tls=broker_client_context(settings))
    app.add_middleware(AuthMiddleware)  # outermost: nothing is routed, counted or forwarded unauthenticated
    for module in (
        health,
        native_topics,
        native_records,
        native_groups,
        rest_v2,
        rest_v2_consumers,
        rest_v3,
        rest_v3_groups,
        rest_v3_acls,
        group_members,
    ):
        app.include_router(module.router)
    # the web console at /ui (docs/console.md), showing each principal what its ACLs let it see
    console.mount(app, settings.console_sample_ms / 1000, access_of, settings.console_object_scan_ms / 1000)
    openapi_links.install(app)  # links for clients and the stateful fuzzer (tests/security)
    return app
