"""FastAPI dependencies: the long-lived objects made in the lifespan, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from topiclake.api.metrics import GatewayMetrics
from topiclake.platform import Broker
from topiclake.settings import GatewaySettings


async def get_broker(request: Request) -> Broker:
    """The broker of this gateway process."""
    broker: Broker = request.app.state.broker
    return broker


async def get_metrics(request: Request) -> GatewayMetrics:
    """The metrics registry of this app."""
    metrics: GatewayMetrics = request.app.state.metrics
    return metrics


async def get_settings(request: Request) -> GatewaySettings:
    """The settings this app was made with."""
    settings: GatewaySettings = request.app.state.settings
    return settings


BrokerDep = Annotated[Broker, Depends(get_broker)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]


def advertised(settings: GatewaySettings) -> tuple[str, int]:
    """Host and port clients should use to reach this broker."""
    return settings.advertised_host or settings.host, settings.advertised_port or settings.port
