"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from topiclake.api.deps import BrokerDep, MetricsDep

router = APIRouter(tags=["health"])


_OK = b'{"status":"ok"}'


@router.get("/healthz", summary="Liveness: the process answers", response_model=dict[str, str])
async def healthz() -> Response:
    # async and pre-encoded: load balancers poll this; it must cost next to nothing
    return Response(_OK, media_type="application/json")


@router.get("/readyz", summary="Readiness: the broker has its catalog open")
async def readyz(broker: BrokerDep) -> dict[str, Any]:  # in-memory reads only
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
