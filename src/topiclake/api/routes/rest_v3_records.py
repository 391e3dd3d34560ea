"""Confluent Kafka REST Proxy v3 produce: ``POST …/topics/{t}/records`` (streaming) and ``…/records:batch``.

``/records`` reads a stream of JSON objects (Confluent: concatenated JSON; also newline-delimited, or wrapped
in one top-level array) and answers one delivery report per record, in order, as each batch is committed.
The HTTP status is 200 once the stream is open; every report carries its own ``error_code`` (200 on
success), so one bad record gets its error in its place and the records after it are still written.
Records that arrive together are produced with one ``broker.produce`` call in the threadpool, so they share
one Delta commit; while that commit runs the next records keep arriving and form the next batch.

Formats: BINARY, JSON and STRING, and AVRO and JSONSCHEMA with the schema registry (``schema_id``,
``schema_version``, ``subject``/``subject_name_strategy`` or an inline ``schema``), serialized in the
threadpool by :func:`topiclake.schema_registry.rest_proxy.encode_v3`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api.auto_create import ensure_topic
from topiclake.api.deps import BrokerDep, MetricsDep, SettingsDep
from topiclake.api.errors import HTTPError, confluent_body
from topiclake.api.http import DuplexStreamingResponse, negotiate, require_media
from topiclake.api.metrics import GatewayMetrics
from topiclake.api.routes._rest_v3 import (
    JSON,
    bad_request,
    check_cluster,
    check_topic_name,
    json_body,
    json_response,
)
from topiclake.api.routes._v3_records_parse import (
    FramingError,
    JsonObjectSplitter,
    Parsed,
    parse_bytes,
    parse_record,
)
from topiclake.platform import Broker
from topiclake.schema_registry import rest_proxy as schema_rest

__all__ = [
    "MAX_BATCH_ENTRIES",
    "MAX_BATCH_RECORDS",
    "MAX_QUEUED_RECORDS",
    "FramingError",
    "JsonObjectSplitter",
    "Parsed",
    "iso",
    "parse_bytes",
    "parse_record",
    "produce_batch",
    "produce_items",
    "produce_records",
    "router",
    "stream_reports",
    "success_body",
]


#: Paths are relative to ``/v3``: this router is included by :data:`.rest_v3.router`, which adds the prefix.
router: APIRouter = APIRouter(tags=["kafka-rest-v3"])

#: Most records produced with one ``broker.produce`` call (one commit) from a stream.
MAX_BATCH_RECORDS = 5000
#: Parsed records waiting for their batch; the request body is not read further while this is full.
MAX_QUEUED_RECORDS = 20_000
#: Confluent's default ``produce.batch.maximum.entries`` for ``records:batch``.
MAX_BATCH_ENTRIES = 10


# ---------------------------------------------------------------------------------------------- producing


def success_body(
    cluster_id: str, topic: str, item: Parsed, partition: int, offset: int, ts: int | None
) -> dict[str, Any]:
    """Confluent's ``ProduceResponse`` for a written record (key/value only where a type was given)."""
    body: dict[str, Any] = {
        "error_code": 200,
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "offset": offset,
        "timestamp": None if ts is None else iso(ts),
    }
    if item.key_type is not None:
        body["key"] = {"type": item.key_type, "size": item.key_size}
    if item.value_type is not None:
        body["value"] = {"type": item.value_type, "size": item.value_size}
    for side, info in (item.schema_info or {}).items():
        body[side] = {**info, "size": item.key_size if side == "key" else item.value_size}
    return body


def iso(ms: int) -> str:
    """Epoch ms as Java's ``Instant.toString()`` with milliseconds: ``2021-02-05T19:14:42.123Z``."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _serialize_deferred(registry: Any, topic: str, item: Parsed) -> None:
    """Serialize an item's schema-format key/value in place (or make it the item's error)."""
    if not item.deferred or item.record is None:
        return
    try:
        framed: dict[str, bytes | None] = {}
        item.schema_info = {}
        for side, obj in item.deferred.items():
            framed[side], item.schema_info[side] = schema_rest.encode_v3(registry, topic, obj, side == "key")
    except e.TopiclakeError as exc:
        item.error, item.record = exc, None
        return
    record = item.record
    item.record = dataclasses.replace(
        record, key=framed.get("key", record.key), value=framed.get("value", record.value)
    )
    item.key_size = len(item.record.key or b"")
    item.value_size = len(item.record.value or b"")


def produce_items(
    broker: Broker,
    metrics: GatewayMetrics,
    cluster_id: str,
    topic: str,
    items: Sequence[Parsed],
    registry: Any = None,
) -> list[dict[str, Any]]:
    """Produce the good records of ``items`` with one ``broker.produce`` call (blocking).

    Returns one report per item, in order: Confluent's ``ProduceResponse`` or ``{"error_code", "message"}``.
    """
    for item in items:
        _serialize_deferred(registry, topic, item)
    started = time.perf_counter()
    reports: list[dict[str, Any]] = [confluent_body(it.error) if it.error else {} for it in items]
    good = [i for i, it in enumerate(items) if it.error is None and it.record is not None]
    if not good:
        return reports
    records = [items[i].record for i in good]
    try:
        results = broker.produce(topic, [r for r in records if r is not None], acks="all")
    except e.TopiclakeError as exc:
        for i in good:
            reports[i] = confluent_body(exc)
        return reports
    written = nbytes = 0
    for i, res in zip(good, results, strict=True):
        item = items[i]
        if res.error is not None or res.partition is None or res.offset is None:
            reports[i] = confluent_body(res.error or e.TopiclakeError("record was not written"))
        else:
            reports[i] = success_body(cluster_id, topic, item, res.partition, res.offset, res.timestamp_ms)
            written += 1
            nbytes += item.key_size + item.value_size
    metrics.produced(topic, written, nbytes, api="v3", acks="all", started=started)
    return reports


@dataclass
class _End:
    error: HTTPError | None = None


async def _read(request: Request, queue: asyncio.Queue[Parsed | _End], limit: int) -> None:
    splitter = JsonObjectSplitter(limit)
    end = _End()
    try:
        async for chunk in request.stream():
            objects, error = splitter.feed(chunk)
            for raw in objects:
                await queue.put(parse_bytes(raw))
            if error is not None:
                raise error
        splitter.finish()
    except FramingError as exc:
        end = _End(bad_request(f"Error processing JSON: {exc}"))
    except ClientDisconnect:
        pass
    await queue.put(end)


async def stream_reports(
    request: Request, broker: Broker, metrics: GatewayMetrics, cluster_id: str, topic: str, limit: int
) -> AsyncIterator[bytes]:
    """Delivery reports, one JSON object per line, in request order, each batch as soon as it is committed."""
    queue: asyncio.Queue[Parsed | _End] = asyncio.Queue(MAX_QUEUED_RECORDS)
    reader = asyncio.create_task(_read(request, queue, limit))
    try:
        while True:
            item = await queue.get()
            batch: list[Parsed] = []
            while not isinstance(item, _End):
                batch.append(item)
                if len(batch) >= MAX_BATCH_RECORDS or queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                reports = await run_in_threadpool(
                    produce_items,
                    broker,
                    metrics,
                    cluster_id,
                    topic,
                    batch,
                    request.app.state.schema_registry,
                )
                yield b"".join(orjson.dumps(r) + b"\n" for r in reports)
            if isinstance(item, _End):
                if item.error is not None:
                    yield orjson.dumps(confluent_body(item.error)) + b"\n"
                return
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def _open_topic(request: Request, broker: Broker, cluster_id: str, topic: str) -> None:
    check_cluster(broker, cluster_id)
    check_topic_name(topic)
    await ensure_topic(request, broker, topic)
    await run_in_threadpool(broker.log, topic)  # TopicNotFound (404) before the stream opens


@router.post("/clusters/{cluster_id}/topics/{topic_name}/records", summary="Produce records (streaming)")
async def produce_records(
    request: Request,
    broker: BrokerDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    cluster_id: str,
    topic_name: str,
) -> Response:
    negotiate(request, (JSON,))
    require_media(request, (JSON,))
    await _open_topic(request, broker, cluster_id, topic_name)
    reports = stream_reports(request, broker, metrics, cluster_id, topic_name, settings.max_request_bytes)
    return DuplexStreamingResponse(reports, media_type=JSON)


@router.post(
    "/clusters/{cluster_id}/topics/{topic_name}/records:batch", status_code=207, summary="Produce a batch"
)
async def produce_batch(
    request: Request,
    broker: BrokerDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    cluster_id: str,
    topic_name: str,
) -> Response:
    negotiate(request, (JSON,))
    body = await json_body(request, settings)
    check_cluster(broker, cluster_id)
    check_topic_name(topic_name)
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise bad_request('the body must be {"entries": [...]}')
    if not entries:
        raise bad_request("the batch is empty")
    if len(entries) > MAX_BATCH_ENTRIES:
        raise bad_request(f"the batch has {len(entries)} entries; at most {MAX_BATCH_ENTRIES} are allowed")
    await _open_topic(request, broker, cluster_id, topic_name)  # created only for a well-formed batch
    ids = [en.get("id") if isinstance(en, dict) else None for en in entries]
    if len(set(map(str, ids))) != len(ids):
        raise bad_request("the entry ids of a batch must be distinct")
    items = [parse_record(en, with_id=True) for en in entries]
    registry = request.app.state.schema_registry
    reports = await run_in_threadpool(produce_items, broker, metrics, cluster_id, topic_name, items, registry)
    successes, failures = [], []
    for rid, report in zip(ids, reports, strict=True):
        if report.get("error_code") == 200:
            successes.append({"id": rid, **{k: v for k, v in report.items() if k != "error_code"}})
        else:
            failures.append({"id": rid, **report})
    return json_response({"successes": successes, "failures": failures}, 207)
