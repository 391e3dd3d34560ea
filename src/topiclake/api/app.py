"""The FastAPI gateway: app factory and lifespan (the broker is made and closed there)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

import topiclake
from topiclake.platform import Broker, Storage
from topiclake.settings import GatewaySettings

logger = logging.getLogger(__name__)


def get_broker(request: Request) -> Broker:
    """The broker of this gateway process."""
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


def create_app(settings: GatewaySettings | None = None) -> FastAPI:
    """Build the gateway app; the broker opens in the lifespan and closes (committing) on shutdown."""
    settings = settings or GatewaySettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        storage = Storage(settings.warehouse, settings.storage_options, fsync=settings.broker.fsync)
        app.state.broker = Broker(storage, settings.broker)
        logger.info(
            "topiclake %s broker %d ready on warehouse %s",
            topiclake.__version__,
            settings.broker.broker_id,
            storage.root,
        )
        try:
            yield
        finally:
            app.state.broker.close()

    app = FastAPI(
        title="topiclake",
        version=topiclake.__version__,
        description="A Kafka-style streaming platform whose partitions are Delta Lake tables.",
        lifespan=lifespan,
    )
    app.state.settings = settings

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: the broker has its catalog open")
    def readyz(broker: BrokerDep) -> dict[str, Any]:
        return {
            "status": "ready",
            "broker_id": broker.config.broker_id,
            "warehouse": broker.storage.root,
            "topics": len(broker.list_topics()),
        }

    return app
