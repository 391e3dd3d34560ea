"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from topiclake.api.deps import BrokerDep, MetricsDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the broker has its catalog open")
def readyz(broker: BrokerDep) -> dict[str, Any]:
    return {
        "status": "ready",
        "broker_id": broker.config.broker_id,
        "cluster_id": broker.cluster_id,
        "warehouse": broker.storage.root,
        "topics": len(broker.list_topics()),
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(m: MetricsDep) -> Response:
    return Response(m.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
