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
import base64
import binascii
import contextlib
import dataclasses
import re
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
from topiclake.platform import Broker, Record
from topiclake.platform.records import now_ms
from topiclake.schema_registry import rest_proxy as schema_rest

#: Paths are relative to ``/v3``: this router is included by :data:`.rest_v3.router`, which adds the prefix.
router: APIRouter = APIRouter(tags=["kafka-rest-v3"])

#: Most records produced with one ``broker.produce`` call (one commit) from a stream.
MAX_BATCH_RECORDS = 5000
#: Parsed records waiting for their batch; the request body is not read further while this is full.
MAX_QUEUED_RECORDS = 20_000
#: Confluent's default ``produce.batch.maximum.entries`` for ``records:batch``.
MAX_BATCH_ENTRIES = 10

_FORMATS = ("BINARY", "JSON", "STRING")
_SCHEMA_FORMATS = ("AVRO", "JSONSCHEMA", "PROTOBUF")
_SCHEMA_FIELDS = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")
_RECORD_FIELDS = frozenset({"id", "partition_id", "headers", "key", "value", "timestamp"})
_BATCH_ID = re.compile(r"[0-9a-zA-Z_-]{1,80}")
_MAX_TIMESTAMP_S = 253_402_300_799  # 9999-12-31T23:59:59Z


@dataclass
class Parsed:
    """One record of a request, ready to produce, or the error that keeps it from being produced."""

    record: Record | None = None
    error: e.TopiclakeError | None = None
    key_type: str | None = None
    value_type: str | None = None
    key_size: int = 0
    value_size: int = 0
    id: str | None = None
    #: key/value objects in a schema format, serialized in the threadpool before producing
    deferred: dict[str, Any] | None = None
    schema_info: dict[str, dict[str, Any]] | None = None


def _data(obj: Any, what: str) -> tuple[bytes | None, str | None]:
    """Serialize ``{"type", "data"}`` into bytes; return (bytes, type reported back or None)."""
    if obj is None:
        return None, None
    if not isinstance(obj, dict):
        raise bad_request(f'{what} must be an object like {{"type": "JSON", "data": ...}}')
    raw_type = obj.get("type")
    if raw_type is not None and not isinstance(raw_type, str):
        raise bad_request(f"{what}.type must be one of {', '.join(_FORMATS)}")
    fmt = raw_type.upper() if raw_type is not None else None
    if fmt in _SCHEMA_FORMATS or any(obj.get(f) is not None for f in _SCHEMA_FIELDS):
        raise bad_request(
            f"{what}: schemas are not supported (no Schema Registry); use BINARY, JSON or STRING"
        )
    if fmt is not None and fmt not in _FORMATS:
        raise bad_request(f"{what}.type {raw_type!r} is not one of {', '.join(_FORMATS)}")
    data = obj.get("data")
    if data is None:
        return None, fmt
    if fmt == "JSON":
        return orjson.dumps(data), fmt
    if fmt == "STRING":
        if not isinstance(data, str):
            raise bad_request(f"{what}.data must be a string for type STRING, not {type(data).__name__}")
        return data.encode(), fmt
    # BINARY, also the format of data without a type (Confluent's serializer falls back to it)
    if not isinstance(data, str):
        raise bad_request(f"{what}.data must be a base64 string for type BINARY, not {type(data).__name__}")
    try:
        return base64.b64decode(data, validate=True), fmt
    except (binascii.Error, ValueError) as exc:
        raise bad_request(f"{what}.data is not a valid base64 string: {exc}") from exc


def _headers(raw: Any) -> list[tuple[str, bytes | None]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise bad_request('headers must be a list of {"name", "value"} objects')
    out: list[tuple[str, bytes | None]] = []
    for h in raw:
        name = h.get("name", h.get("key")) if isinstance(h, dict) else None  # "key": Karapace/v2 spelling
        if not isinstance(name, str):
            raise bad_request('each header needs a string "name"')
        value = h.get("value")
        if value is not None and not isinstance(value, str):
            raise bad_request(f"the value of header {name!r} must be a base64 string or null")
        try:
            out.append((name, None if value is None else base64.b64decode(value, validate=True)))
        except (binascii.Error, ValueError) as exc:
            raise bad_request(f"the value of header {name!r} is not valid base64: {exc}") from exc
    return out


def _timestamp_ms(raw: Any) -> int:
    """ISO-8601 date-time (Confluent), or a number of seconds since the epoch (Jackson's reading)."""
    if raw is None:
        return now_ms()
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError as exc:
            raise bad_request(f"timestamp {raw!r} is not an ISO-8601 date-time") from exc
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        if dt.timestamp() < 0:
            raise bad_request(f"timestamp {raw!r} is before the epoch")
        return int(dt.timestamp() * 1000)
    if isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= _MAX_TIMESTAMP_S:
        return int(raw * 1000)
    raise bad_request(f"timestamp must be an ISO-8601 date-time string, not {raw!r}")


def parse_record(obj: Any, with_id: bool = False) -> Parsed:
    """Turn one decoded produce request into a record; problems become the record's error (never raised)."""
    try:
        if not isinstance(obj, dict):
            raise bad_request(f"a record must be a JSON object, not {type(obj).__name__}")
        unknown = set(obj) - _RECORD_FIELDS
        if unknown:
            raise bad_request(
                f"unrecognized field(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_RECORD_FIELDS))}"
            )
        rid = obj.get("id")
        if with_id and (not isinstance(rid, str) or not _BATCH_ID.fullmatch(rid)):
            raise HTTPError(422, 422, "Batch entry identifier not a valid string.", code="invalid_request")
        partition = obj.get("partition_id")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
            raise bad_request(f"partition_id must be an integer, not {partition!r}")
        deferred = {s: obj[s] for s in ("key", "value") if schema_rest.is_schema_data(obj.get(s))}
        key, key_type = _data(None if "key" in deferred else obj.get("key"), "key")
        value, value_type = _data(None if "value" in deferred else obj.get("value"), "value")
        record = Record(
            key, value, _headers(obj.get("headers")), _timestamp_ms(obj.get("timestamp")), partition
        )
        return Parsed(
            record, None, key_type, value_type, len(key or b""), len(value or b""), rid, deferred or None
        )
    except e.TopiclakeError as exc:
        return Parsed(
            error=exc, id=obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
        )


def parse_bytes(raw: bytes) -> Parsed:
    """Parse one JSON object of a stream."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Parsed(error=bad_request(f"Error processing JSON: {exc}"))
    return parse_record(obj)


class FramingError(Exception):
    """The stream is no longer a sequence of JSON objects: nothing after this point can be read."""


_SEPARATORS = re.compile(rb"[\s,\[\]]*")  # between objects: whitespace, NDJSON newlines, a wrapping array
_OUTSIDE = re.compile(rb'[{}"]')
_INSIDE = re.compile(rb'["\\]')


class JsonObjectSplitter:
    """Split a byte stream into complete top-level JSON objects by brace matching that respects strings.

    Handles concatenated JSON (Confluent), newline-delimited JSON and objects inside one top-level array.
    Each object is decoded (and validated) separately, so a malformed object is an error of its own.

    Args:
        limit: Largest object, in bytes; a longer one is a :class:`FramingError`.
    """

    def __init__(self, limit: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._limit = limit

    def feed(self, chunk: bytes) -> tuple[list[bytes], FramingError | None]:
        """Add bytes; return the objects completed by them, and the framing error that stopped the split.

        After an error the rest of the stream cannot be split; the objects before it are still returned.
        """
        buf = self._buf
        buf += chunk
        out: list[bytes] = []
        i, start = self._pos, 0
        while i < len(buf):
            if self._depth == 0:
                sep = _SEPARATORS.match(buf, i)
                i = sep.end() if sep else i
                if i == len(buf):
                    break
                if buf[i] != ord("{"):
                    return out, FramingError(f"expected a JSON object, found {chr(buf[i])!r}")
                start, self._depth, i = i, 1, i + 1
            elif self._in_string:
                m = _INSIDE.search(buf, i)
                if m is None:
                    i = len(buf)
                elif m.group() == b"\\":
                    i = m.end() + 1  # may point past the end: the escaped byte is still to come
                else:
                    self._in_string, i = False, m.end()
            else:
                m = _OUTSIDE.search(buf, i)
                if m is None:
                    i = len(buf)
                    continue
                c, i = m.group(), m.end()
                if c == b'"':
                    self._in_string = True
                elif c == b"{":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        out.append(bytes(buf[start:i]))
                        start = i
        keep_from = start if self._depth else min(i, len(buf))
        del buf[:keep_from]
        self._pos = i - keep_from
        if len(buf) > self._limit:
            return out, FramingError(f"a record is larger than the request limit of {self._limit} bytes")
        return out, None

    def finish(self) -> None:
        """Check that the stream did not end inside an object."""
        if self._depth or self._in_string:
            raise FramingError("the request body ended inside a JSON object")


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


async def _open_topic(broker: Broker, cluster_id: str, topic: str) -> None:
    check_cluster(broker, cluster_id)
    check_topic_name(topic)
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
    await _open_topic(broker, cluster_id, topic_name)
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
    await _open_topic(broker, cluster_id, topic_name)
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise bad_request('the body must be {"entries": [...]}')
    if not entries:
        raise bad_request("the batch is empty")
    if len(entries) > MAX_BATCH_ENTRIES:
        raise bad_request(f"the batch has {len(entries)} entries; at most {MAX_BATCH_ENTRIES} are allowed")
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
