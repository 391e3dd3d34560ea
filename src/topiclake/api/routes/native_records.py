"""Native API: produce (JSON, NDJSON stream, Arrow IPC) and fetch (JSON or Arrow IPC) records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake.api import codec
from topiclake.api.auto_create import ensure_topic
from topiclake.api.deps import BrokerDep, MetricsDep, SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.http import DuplexStreamingResponse, negotiate, read_body, require_media
from topiclake.api.produce_body import answer_bodies, producer_from_json, result_bodies, rows_from_json
from topiclake.errors import InvalidRecord, TopiclakeError
from topiclake.platform import Broker, ProducerInfo, produce_rows
from topiclake.platform.records import normalize_acks
from topiclake.schema_registry import rest_proxy as schema_rest

router = APIRouter(prefix="/v1", tags=["records"])

JSON = "application/json"
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"
_STREAM_BATCH = 1000

_PRODUCE_EXAMPLE = {
    "records": [
        {"key": "customer-1", "value": {"total": 12.5}, "headers": {"source": "web"}},
        {"key": None, "value": {"total": 3}, "partition": 0, "timestamp": 1767225600000},
    ]
}


def _columns(
    objs: list[Any], encoding: str, serialize: Callable[[Any, bool], bytes | None] | None = None
) -> tuple[pa.Table, list[int | None], dict[int, InvalidRecord]]:
    """Input columns for the records that can be encoded, their explicit partitions, and the errors of
    those that cannot (by position in ``objs``). ``serialize`` (keys and values with registered schemas)
    replaces the encoding when given."""
    rows, explicit, errors = rows_from_json(objs, encoding, serialize)
    return rows.to_table(), explicit, errors


def _produce_objects(
    broker: Broker,
    topic: str,
    objs: list[Any],
    encoding: str,
    partition: int | None,
    acks: str,
    producer: ProducerInfo | None,
    serialize: Callable[[Any, bool], bytes | None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Encode and produce; a record that cannot be encoded gets its own error (all or nothing with a
    producer id). Returns the result objects in order and the bytes produced."""
    table, explicit, errors = _columns(objs, encoding, serialize)
    if errors and producer is not None:
        raise next(iter(errors.values()))
    nbytes = sum(table[c].nbytes for c in ("key", "value"))
    produced = broker.produce_table(topic, table, explicit, partition=partition, acks=acks, producer=producer)
    return result_bodies(produced, errors, len(objs)), nbytes


@router.post(
    "/topics/{topic}/records",
    summary="Produce records (JSON, NDJSON stream or Arrow IPC)",
    openapi_extra={
        "requestBody": {
            "content": {
                JSON: {"example": _PRODUCE_EXAMPLE},
                NDJSON: {"example": '{"key": "a", "value": 1}\n{"key": "b", "value": 2}\n'},
                ARROW: {"schema": {"type": "string", "format": "binary"}},
            },
            "required": True,
        }
    },
    responses={
        200: {
            "description": "One result per record, in request order (JSON and NDJSON); for Arrow, the base "
            "offset and count of the batch.",
            "content": {
                JSON: {
                    "example": {
                        "topic": "orders",
                        "results": [{"partition": 1, "offset": 41, "timestamp": None, "error": None}],
                    }
                }
            },
        }
    },
)
async def produce(
    topic: str,
    request: Request,
    broker: BrokerDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    acks: str = Query(
        "all", description="all (-1): after the Delta commit; 1: after offsets are assigned; 0: at once."
    ),
    partition: int | None = Query(None, description="Send every record to this partition."),
    encoding: str = Query(
        "json", description="How keys and values are given: json, binary (base64) or string."
    ),
) -> Response:
    """Append records. With ``acks=all`` (default) the answer comes after the Delta commit that holds them:
    they are already in the topic's table, visible to SQL."""
    started = time.perf_counter()
    ack = normalize_acks(acks)
    if encoding not in codec.ENCODINGS:
        raise InvalidRecord(f"unknown encoding {encoding!r}: use json, binary or string")
    mt = require_media(request, (JSON, NDJSON, ARROW))
    if mt == NDJSON:
        await ensure_topic(request, broker, topic)  # a stream's answer is 200 with one result per line
        await run_in_threadpool(
            broker.describe_topic, topic
        )  # an unknown topic is a 404, not a stream of errors
        return DuplexStreamingResponse(
            _produce_stream(request, broker, metrics, settings, topic, encoding, partition, ack, started),
            media_type=NDJSON,
        )
    body = await read_body(request, settings.max_request_bytes)
    if mt == ARROW:
        return await _produce_arrow(request, body, broker, metrics, topic, partition, ack, started)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HTTPError(400, 40002, f"body is not valid JSON: {exc}", "invalid_json") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise HTTPError(422, 42206, 'body must be {"records": [...]}', "invalid_request")
    if not doc["records"]:
        raise HTTPError(422, 42206, "records must not be empty", "invalid_request")
    producer = producer_from_json(doc.get("producer"))
    # created (auto.create.topics.enable) only for a request that is well formed: a 4xx changes nothing
    await ensure_topic(request, broker, topic)
    if doc.get("key_schema_id") is not None or doc.get("value_schema_id") is not None:
        serialize = await run_in_threadpool(  # records framed with registered schemas (docs/schemas.md)
            schema_rest.native_serializer,
            request.app.state.schema_registry,
            doc.get("key_schema_id"),
            doc.get("value_schema_id"),
        )
        results, nbytes = await run_in_threadpool(
            _produce_objects, broker, topic, doc["records"], encoding, partition, ack, producer, serialize
        )
        metrics.produced(topic, len(results), nbytes, "native", ack, started)
        return Response(orjson.dumps({"topic": topic, "results": results}), media_type=JSON)
    rows, explicit, errors = rows_from_json(doc["records"], encoding)
    if errors and producer is not None:
        raise next(iter(errors.values()))
    pending = produce_rows.start(
        broker, topic, rows, explicit, partition=partition, acks=ack, producer=producer
    )
    if pending is None:  # the general path: may open the topic's table or forward to other brokers
        results, nbytes = await run_in_threadpool(
            _produce_objects, broker, topic, doc["records"], encoding, partition, ack, producer
        )
    else:  # on the event loop: queued, then (acks=all) awaited without a thread
        await pending.committed()
        results = answer_bodies(pending, errors, len(doc["records"]))
        nbytes = sum(len(k or b"") + len(v or b"") for k, v in zip(rows.keys, rows.values, strict=True))
    metrics.produced(topic, len(results), nbytes, "native", ack, started)
    return Response(orjson.dumps({"topic": topic, "results": results}), media_type=JSON)


async def _produce_arrow(
    request: Request,
    body: bytes,
    broker: Broker,
    metrics: Any,
    topic: str,
    partition: int | None,
    ack: str,
    started: float,
) -> Response:
    if partition is None:
        raise HTTPError(422, 42206, "the Arrow path needs ?partition=N", "invalid_request")
    try:
        table = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise HTTPError(400, 40002, f"body is not an Arrow IPC stream: {exc}", "invalid_arrow") from exc
    await ensure_topic(request, broker, topic)
    part, count, base = await run_in_threadpool(broker.produce_arrow, topic, partition, table, acks=ack)
    nbytes = sum(table[c].nbytes for c in ("key", "value") if c in table.column_names)
    metrics.produced(topic, count, nbytes, "native-arrow", ack, started)
    body_out = {"topic": topic, "partition": part, "base_offset": base, "count": count}
    return Response(orjson.dumps(body_out), media_type=JSON)


async def _produce_stream(
    request: Request,
    broker: Broker,
    metrics: Any,
    settings: Any,
    topic: str,
    encoding: str,
    partition: int | None,
    ack: str,
    started: float,
) -> AsyncIterator[bytes]:
    """Read NDJSON lines as they arrive and produce, in one call (one Delta commit), everything that arrived
    while the previous call was committing; stream one result line per record back, in order."""
    pending: list[Any] = []
    arrived = asyncio.Event()
    done = False
    failure: BaseException | None = None

    async def reader() -> None:
        nonlocal done, failure
        buffer = b""
        try:
            async for chunk in request.stream():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                pending.extend(_parse_line(line) for line in lines if line.strip())
                if pending:
                    arrived.set()
            if buffer.strip():
                pending.append(_parse_line(buffer))
        except BaseException as exc:  # a client that goes away mid-stream
            failure = exc
        finally:
            done = True
            arrived.set()

    task = asyncio.create_task(reader())
    try:
        while True:
            await arrived.wait()
            arrived.clear()
            if failure is not None:
                return
            while pending:
                objs = pending[:_STREAM_BATCH]
                del pending[:_STREAM_BATCH]
                try:
                    results, nbytes = await run_in_threadpool(
                        _produce_objects, broker, topic, objs, encoding, partition, ack, None
                    )
                    metrics.produced(topic, len(results), nbytes, "native-ndjson", ack, started)
                except TopiclakeError as exc:
                    error = {"code": exc.code, "message": exc.message}
                    results = [{"partition": None, "offset": None, "error": error} for _ in objs]
                yield b"".join(orjson.dumps(r) + b"\n" for r in results)
            if done and not pending:
                return
    finally:
        task.cancel()


def _parse_line(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return InvalidRecord(f"line is not JSON ({exc}): {line[:60].decode(errors='replace')!r}")


def _records_json(batch: pa.Table, encoding: str) -> list[dict[str, Any]]:
    """The records of a fetch as JSON objects, built column by column."""
    n = batch.num_rows
    stamps = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
    kinds = ["LogAppendTime" if t == 1 else "CreateTime" for t in batch["timestampType"].to_pylist()]
    keys = codec.decode_column(batch["key"].to_pylist(), encoding)
    values = codec.decode_column(batch["value"].to_pylist(), encoding)
    column = batch["headers"]
    if column.null_count == n:
        headers: list[Any] = [()] * n  # one shared empty array: the body is serialised at once
    else:
        hdr_enc = "binary" if encoding == "binary" else "string"
        headers = [
            [{"key": h["key"], "value": codec.decode(h["value"], hdr_enc)} for h in hs or ()]
            for hs in column.to_pylist()
        ]
    return [
        {"offset": o, "timestamp": t, "timestamp_type": kind, "key": k, "value": v, "headers": h}
        for o, t, kind, k, v, h in zip(
            batch["offset"].to_pylist(), stamps, kinds, keys, values, headers, strict=True
        )
    ]


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    summary="Fetch committed records from an offset (long-poll with wait_ms)",
    responses={
        200: {
            "content": {
                JSON: {
                    "example": {
                        "topic": "orders",
                        "partition": 0,
                        "records": [
                            {
                                "offset": 0,
                                "timestamp": 1767225600000,
                                "timestamp_type": "CreateTime",
                                "key": "Y3VzdG9tZXItMQ==",
                                "value": "eyJ0b3RhbCI6IDEyLjV9",
                                "headers": [{"key": "source", "value": "web"}],
                            }
                        ],
                        "next_offset": 1,
                        "high_watermark": 1,
                        "log_start_offset": 0,
                    }
                },
                ARROW: {"schema": {"type": "string", "format": "binary"}},
            }
        },
        416: {"description": "offset below the log start or beyond the end (details say both ends)"},
    },
)
async def fetch(
    topic: str,
    partition: int,
    request: Request,
    broker: BrokerDep,
    metrics: MetricsDep,
    offset: int = Query(..., description="First offset to return."),
    max_records: int = Query(500, ge=1, le=100_000),
    max_bytes: int = Query(1024 * 1024, ge=1, le=256 * 1024 * 1024),
    wait_ms: int = Query(0, ge=0, le=60_000, description="Wait up to this long for a record at the end."),
    encoding: str = Query(
        "binary", description="How keys and values are returned: binary (base64), string, json."
    ),
) -> Response:
    """Committed records only: at least one record when there is one, even if larger than max_bytes."""
    started = time.perf_counter()
    if encoding not in codec.ENCODINGS:
        raise InvalidRecord(f"unknown encoding {encoding!r}: use binary, string or json")
    mt = negotiate(request, (JSON, ARROW))
    result = await run_in_threadpool(broker.fetch, topic, partition, offset, max_records, max_bytes, wait_ms)
    batch = result.records
    nbytes = sum(batch[c].nbytes for c in ("key", "value"))
    metrics.fetched(topic, batch.num_rows, nbytes, "native", started)
    meta = {
        "x-topiclake-next-offset": str(result.next_offset),
        "x-topiclake-high-watermark": str(result.high_watermark),
        "x-topiclake-log-start-offset": str(result.log_start_offset),
    }
    if mt == ARROW:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_table(batch)
        return Response(sink.getvalue().to_pybytes(), media_type=ARROW, headers=meta)
    body = {
        "topic": topic,
        "partition": partition,
        "records": _records_json(batch, encoding),
        "next_offset": result.next_offset,
        "high_watermark": result.high_watermark,
        "log_start_offset": result.log_start_offset,
    }
    return Response(orjson.dumps(body), media_type=JSON, headers=meta)
