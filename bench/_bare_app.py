"""The reference for HTTP benchmarks: a bare FastAPI app doing only what any produce route must (read and
parse the body, answer JSON), on one uvicorn worker like the gateway. Run by bench/http_wrk.py."""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI()


@app.post("/v1/topics/{topic}/records")
async def produce(topic: str, request: Request) -> Response:
    doc = orjson.loads(await request.body())
    results = [
        {"partition": 0, "offset": i, "timestamp": None, "error": None} for i in range(len(doc["records"]))
    ]
    return Response(orjson.dumps({"topic": topic, "results": results}), media_type="application/json")


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
