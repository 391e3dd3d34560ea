"""Confluent Kafka REST Proxy API v2: consumer instances (``/consumers``).

Paths, bodies, status codes and ``{"error_code", "message"}`` errors follow Confluent's kafka-rest
(``ConsumersResource`` and ``KafkaConsumerState``):

* ``POST /consumers/{group}`` creates an instance (``name``, ``format`` json|binary, ``auto.offset.reset``,
  ``auto.commit.enable`` or ``enable.auto.commit``, ``fetch.min.bytes``, ``consumer.request.timeout.ms``)
  and answers ``{"instance_id", "base_uri"}``; ``DELETE .../instances/{instance}`` removes it (204).
* ``subscription`` (topics or ``topic_pattern``), ``assignments`` (manual), ``positions`` (offsets and
  ``timestamps``), ``positions/beginning``, ``positions/end``: 204, or 409 40903 for what Kafka's consumer
  refuses as an illegal state (subscribe and assign mixed, seek on a partition not assigned).
* ``GET .../records?timeout=&max_bytes=`` with ``Accept: application/vnd.kafka.{binary,json}.v2+json``
  answers as soon as records are there (long-polls otherwise); an ``Accept`` for another format than the
  instance's is 406 40601. Records carry ``topic, key, value, partition, offset`` and also ``timestamp``
  (epoch ms) and ``headers`` (``[{"key", "value"}]``, value base64).
* ``POST .../offsets`` commits: without a body every consumed position; with ``offsets`` each given
  ``offset`` is the last record processed and the committed offset is ``offset + 1`` (Confluent's
  ``new OffsetAndMetadata(offset + 1)``). ``GET .../offsets`` with ``partitions`` returns committed offsets
  as stored (the next offset to read).

Accepted variants: ``enable.auto.commit`` for ``auto.commit.enable``; booleans and numbers as JSON values
or strings; ``partitions`` (Redpanda) for ``offsets`` in a commit; a timestamp in a seek as ISO-8601
(Confluent) or epoch milliseconds.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake.api import codec, http
from topiclake.api.auth import AccessDep, access_of
from topiclake.api.consumer_instances import (
    ConsumerInstanceManager,
    InstanceConfig,
    TopicPartition,
    get_manager,
)
from topiclake.api.deps import SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.errors import Forbidden
from topiclake.schema_registry import rest_proxy as schema_reads
from topiclake.security import Operation, ResourceType

router = APIRouter(tags=["kafka-rest-v2"])

V2_JSON = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
_SCHEMA_V2 = (
    "application/vnd.kafka.avro.v2+json",
    "application/vnd.kafka.jsonschema.v2+json",
    "application/vnd.kafka.protobuf.v2+json",
)
#: Request bodies Confluent's ConsumersResource consumes (plus plain JSON).
CONSUMES = (V2_JSON, BINARY_V2, JSON_V2, *_SCHEMA_V2, "application/vnd.kafka+json", "application/json")
#: Responses of the non-read endpoints.
PRODUCES = (V2_JSON, "application/vnd.kafka+json", "application/json", BINARY_V2, JSON_V2, *_SCHEMA_V2)
#: ``Accept`` of a read -> embedded format asked for (Jersey picks binary for the generic v2 types).
READ_FORMATS: dict[str, str] = {
    BINARY_V2: "binary",
    JSON_V2: "json",
    V2_JSON: "binary",
    "application/vnd.kafka+json": "binary",
    "application/json": "binary",
    "application/vnd.kafka.avro.v2+json": "avro",
    "application/vnd.kafka.jsonschema.v2+json": "jsonschema",
    "application/vnd.kafka.protobuf.v2+json": "protobuf",
}
_MAX_BODY = 1024 * 1024
_FORMAT_MEDIA = {fmt: mt for mt, fmt in READ_FORMATS.items() if fmt in ("avro", "jsonschema", "protobuf")}

Manager = Annotated[ConsumerInstanceManager, Depends(get_manager)]


async def _accept(request: Request) -> str:
    try:
        return http.negotiate(request, PRODUCES)
    except HTTPError as exc:
        raise HTTPError(406, 406, exc.message, code="not_acceptable") from None


Accept = Annotated[str, Depends(_accept)]


def _json(body: Any, status: int = 200, media: str = V2_JSON) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=media)


def _no_content() -> Response:
    return Response(status_code=204)


def _bad_request(message: str) -> HTTPError:
    # Jackson mapping errors: 400 with error_code 400 (rest-utils' JsonMappingExceptionMapper)
    return HTTPError(400, 400, message, code="invalid_request")


def _invalid_config(message: str) -> HTTPError:
    return HTTPError(422, 42204, f"Invalid consumer configuration: {message}", code="invalid_config")


async def _body(request: Request, settings: Any, required: bool, what: str) -> dict[str, Any] | None:
    """The JSON object body (None when empty and not required)."""
    raw = await http.read_body(request, min(settings.max_request_bytes, _MAX_BODY))
    if not raw.strip():
        if required:
            # @NotNull on the resource's body parameter: a constraint violation
            raise HTTPError(422, 422, f"the {what} request needs a JSON body", code="invalid_request")
        return None
    mt = http.media_type(request)
    if mt and mt not in CONSUMES:
        raise HTTPError(
            415, 415, f"unsupported Content-Type {mt!r}; send {V2_JSON}", code="unsupported_media_type"
        )
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad_request(f"request body is not valid JSON: {exc}") from None
    if doc is None and not required:
        return None
    if not isinstance(doc, dict):
        raise _bad_request(f"the {what} body must be a JSON object, not {type(doc).__name__}")
    return doc


# ---------------------------------------------------------------------------------------------- parsing


def _as_int(value: Any, where: str) -> int:
    """An integer as Jackson reads one: a JSON integer, an integral float, or a numeric string."""
    if isinstance(value, bool):
        raise _bad_request(f"{where} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise _bad_request(f"{where} must be an integer, not {orjson.dumps(value).decode()[:40]}")


def _as_str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad_request(f"{where} must be a non-empty string, not {orjson.dumps(value).decode()[:40]}")
    return value


def _list(doc: dict[str, Any], key: str, what: str) -> list[Any]:
    raw = doc.get(key)
    if raw is None:
        raise HTTPError(422, 422, f"{what} needs '{key}': a list", code="invalid_request")
    if not isinstance(raw, list):
        raise _bad_request(f"'{key}' must be a list, not {type(raw).__name__}")
    return raw


def _item(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad_request(f"{where} must be an object with topic and partition")
    return raw


def _tp(item: dict[str, Any], where: str) -> TopicPartition:
    if "partition" not in item:
        raise _bad_request(f"{where}.partition is required")
    partition = _as_int(item.get("partition"), f"{where}.partition")
    if partition < 0:
        raise _bad_request(f"{where}.partition must not be negative")
    return _as_str(item.get("topic"), f"{where}.topic"), partition


def _partitions(doc: dict[str, Any], what: str) -> list[TopicPartition]:
    return [
        _tp(_item(r, f"partitions[{i}]"), f"partitions[{i}]")
        for i, r in enumerate(_list(doc, "partitions", what))
    ]


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _invalid_config(f"{name} must be true or false, not {value!r}")


def _config_int(value: Any, name: str, minimum: int) -> int:
    try:
        n = _as_int(value, name)
    except HTTPError:
        raise _invalid_config(f"{name} must be an integer, not {value!r}") from None
    if n < minimum:
        raise _invalid_config(f"{name} must be at least {minimum}, not {n}")
    return n


def _instance_config(
    doc: dict[str, Any], manager: ConsumerInstanceManager
) -> tuple[str | None, InstanceConfig]:
    """The instance name and config of a create request (Confluent's ``ConsumerInstanceConfig``)."""
    name = doc.get("name")
    if doc.get("id") is not None:  # the deprecated 'id' overrides 'name' in Confluent
        name = doc.get("id")
    if name is not None and (not isinstance(name, str) or not name or len(name) > 249 or "/" in name):
        raise _invalid_config(f"name must be a string of 1 to 249 characters without '/', not {name!r}")
    fmt = doc.get("format")
    fmt = "binary" if fmt is None else fmt
    if not isinstance(fmt, str):
        raise _invalid_config(f"format must be a string, not {fmt!r}")
    fmt = fmt.lower()
    if fmt not in ("json", "binary", "avro", "jsonschema", "protobuf"):
        raise _invalid_config(
            f"format must be json, binary, avro, jsonschema or protobuf, not {doc.get('format')!r}"
        )
    reset = doc.get("auto.offset.reset", "latest")
    reset = "latest" if reset is None else reset
    if not isinstance(reset, str) or reset.lower() not in ("earliest", "latest", "none"):
        raise _invalid_config(f"auto.offset.reset must be earliest, latest or none, not {reset!r}")
    commit_raw = doc.get("auto.commit.enable", doc.get("enable.auto.commit"))
    auto_commit = True if commit_raw is None else _bool(commit_raw, "auto.commit.enable")
    min_raw = doc.get("fetch.min.bytes")
    fetch_min = 1 if min_raw is None else _config_int(min_raw, "fetch.min.bytes", -1)
    timeout_raw = doc.get("consumer.request.timeout.ms")
    timeout = (
        manager.request_timeout_ms
        if timeout_raw is None
        else _config_int(timeout_raw, "consumer.request.timeout.ms", 0)
    )
    config = InstanceConfig(
        format=fmt,  # type: ignore[arg-type]
        auto_offset_reset="earliest"
        if reset.lower() == "earliest"
        else "none"
        if reset.lower() == "none"
        else "latest",
        auto_commit=auto_commit,
        fetch_min_bytes=max(1, fetch_min),
        request_timeout_ms=timeout,
    )
    return name, config


def _timestamp_ms(value: Any, where: str) -> int:
    """A seek timestamp: ISO-8601 (Confluent's ``Instant``) or epoch milliseconds."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise _bad_request(
                f"{where} must be an ISO-8601 instant or epoch milliseconds, not {value!r}"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return math.floor(parsed.timestamp() * 1000)
    ms = _as_int(value, where)
    if ms < 0:
        raise _bad_request(f"{where} must not be negative")
    return ms


# ---------------------------------------------------------------------------------------------- records out


def _records_body(batches: list[pa.Table], fmt: str, registry: Any = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    decode: Callable[[bytes | None, str], Any] = codec.decode
    if fmt in ("avro", "jsonschema", "protobuf"):
        decode = schema_reads.decoder(registry)
    for batch in batches:
        cols = batch.select(["topic", "partition", "offset", "key", "value", "headers"]).to_pydict()
        ts = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
        for i in range(batch.num_rows):
            headers = cols["headers"][i]
            out.append(
                {
                    "topic": cols["topic"][i],
                    "key": decode(cols["key"][i], fmt),
                    "value": decode(cols["value"][i], fmt),
                    "partition": cols["partition"][i],
                    "offset": cols["offset"][i],
                    "timestamp": ts[i],
                    "headers": [
                        {"key": h["key"], "value": decode(h["value"], "binary")} for h in headers or ()
                    ],
                }
            )
    return out


def _read_format(request: Request) -> tuple[str, str | None]:
    """The response media type and the embedded format the ``Accept`` header asks for (None: any)."""
    accept = request.headers.get("accept", "").strip()
    wanted = http.accepted(request)
    if not wanted:
        return "", None
    for mt in wanted:
        if mt in READ_FORMATS:
            return mt, READ_FORMATS[mt]
        if mt in ("*/*", "application/*"):
            return "", None
    raise HTTPError(
        406,
        406,
        f"cannot answer a read with {accept!r}; acceptable: {BINARY_V2}, {JSON_V2}, {V2_JSON}",
        code="not_acceptable",
    )


def _query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        # JAX-RS answers an unparsable @QueryParam long with 404
        raise HTTPError(
            404, 404, f"query parameter {name} must be an integer, not {raw[:20]!r}", "http_error"
        ) from None


# ---------------------------------------------------------------------------------------------- routes


@router.post("/consumers/{group}", summary="Create a consumer instance in a group (v2)")
async def create_instance(
    request: Request, group: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    doc = await _body(request, settings, required=False, what="create consumer") or {}
    name, config = _instance_config(doc, manager)
    inst = manager.create(group, name, config)
    base = str(request.base_url).rstrip("/")
    base_uri = f"{base}/consumers/{quote(group, safe='')}/instances/{quote(inst.name, safe='')}"
    return _json({"instance_id": inst.name, "base_uri": base_uri})


@router.delete("/consumers/{group}/instances/{instance}", summary="Delete a consumer instance (v2)")
def delete_instance(group: str, instance: str, manager: Manager, _accept: Accept) -> Response:
    manager.delete(group, instance)
    return _no_content()


@router.post("/consumers/{group}/instances/{instance}/subscription", summary="Subscribe (v2)")
async def subscribe(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=True, what="subscription")
    assert doc is not None
    topics_raw = doc.get("topics")
    pattern = doc.get("topic_pattern")
    if topics_raw is not None and pattern is not None:
        raise HTTPError(422, 422, "give either topics or topic_pattern, not both", code="invalid_request")
    topics: list[str] | None = None
    if topics_raw is not None:
        if not isinstance(topics_raw, list):
            raise _bad_request("'topics' must be a list of topic names")
        topics = [_as_str(t, f"topics[{i}]") for i, t in enumerate(topics_raw)]
        access_of(request.scope).require_topics(Operation.READ, topics)
    elif pattern is not None:
        pattern = _as_str(pattern, "topic_pattern")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise HTTPError(
                422, 422, f"topic_pattern is not a valid regex: {exc}", code="invalid_request"
            ) from None
    else:
        raise HTTPError(
            422, 422, "a subscription needs topics (a list) or topic_pattern", code="invalid_request"
        )
    await run_in_threadpool(manager.subscribe, inst, topics, pattern)
    return _no_content()


@router.get("/consumers/{group}/instances/{instance}/subscription", summary="Subscribed topics (v2)")
def get_subscription(
    group: str, instance: str, manager: Manager, _accept: Accept, access: AccessDep
) -> Response:
    inst = manager.get(group, instance)
    return _json({"topics": access.visible(manager.subscription(inst))})


@router.delete("/consumers/{group}/instances/{instance}/subscription", summary="Unsubscribe (v2)")
def unsubscribe(group: str, instance: str, manager: Manager, _accept: Accept) -> Response:
    inst = manager.get(group, instance)
    manager.unsubscribe(inst)
    return _no_content()


@router.post("/consumers/{group}/instances/{instance}/assignments", summary="Assign partitions by hand (v2)")
async def assign(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=True, what="assignment")
    assert doc is not None
    partitions = _partitions(doc, "an assignment")
    access_of(request.scope).require_topics(Operation.READ, (t for t, _ in partitions))
    await run_in_threadpool(manager.assign, inst, partitions)
    return _no_content()


@router.get("/consumers/{group}/instances/{instance}/assignments", summary="Assigned partitions (v2)")
def get_assignments(
    group: str, instance: str, manager: Manager, _accept: Accept, access: AccessDep
) -> Response:
    inst = manager.get(group, instance)
    shown = access.visible(manager.assignment(inst), lambda tp: tp[0])
    return _json({"partitions": [{"topic": t, "partition": p} for t, p in shown]})


@router.post(
    "/consumers/{group}/instances/{instance}/positions", summary="Seek to offsets or timestamps (v2)"
)
async def seek(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=True, what="seek")
    assert doc is not None
    if doc.get("offsets") is None and doc.get("timestamps") is None:
        raise HTTPError(422, 422, "a seek needs 'offsets' and/or 'timestamps'", code="invalid_request")
    offsets: dict[TopicPartition, int] = {}
    for i, raw in enumerate(_list(doc, "offsets", "a seek") if doc.get("offsets") is not None else ()):
        item = _item(raw, f"offsets[{i}]")
        offset = _as_int(item.get("offset"), f"offsets[{i}].offset")
        if offset < 0:
            raise _bad_request(f"offsets[{i}].offset must not be negative")
        offsets[_tp(item, f"offsets[{i}]")] = offset
    times: dict[TopicPartition, int] = {}
    for i, raw in enumerate(_list(doc, "timestamps", "a seek") if doc.get("timestamps") is not None else ()):
        item = _item(raw, f"timestamps[{i}]")
        times[_tp(item, f"timestamps[{i}]")] = _timestamp_ms(
            item.get("timestamp"), f"timestamps[{i}].timestamp"
        )
    await run_in_threadpool(manager.seek, inst, offsets, times)
    return _no_content()


async def _seek_to(
    request: Request, group: str, instance: str, manager: ConsumerInstanceManager, settings: Any, where: str
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=True, what="seek")
    assert doc is not None
    partitions = _partitions(doc, "a seek")
    await run_in_threadpool(
        manager.seek_to, inst, partitions, "earliest" if where == "beginning" else "latest"
    )
    return _no_content()


@router.post(
    "/consumers/{group}/instances/{instance}/positions/beginning", summary="Seek to the beginning (v2)"
)
async def seek_to_beginning(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    return await _seek_to(request, group, instance, manager, settings, "beginning")


@router.post("/consumers/{group}/instances/{instance}/positions/end", summary="Seek to the end (v2)")
async def seek_to_end(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    return await _seek_to(request, group, instance, manager, settings, "end")


@router.get("/consumers/{group}/instances/{instance}/records", summary="Read records (v2)")
async def read_records(request: Request, group: str, instance: str, manager: Manager) -> Response:
    media, wanted = _read_format(request)
    timeout = _query_int(request, "timeout")
    max_bytes = _query_int(request, "max_bytes")
    inst = await run_in_threadpool(manager.get, group, instance)
    fmt = inst.config.format
    if wanted is not None and wanted != fmt:
        raise HTTPError(
            406,
            40601,
            "The requested embedded data format does not match the deserializer for this consumer "
            f"instance: it reads {fmt}, the request accepts {wanted} (send Accept: "
            f"{BINARY_V2 if fmt == 'binary' else JSON_V2})",
            code="format_mismatch",
        )
    access = access_of(request.scope)
    assigned = await run_in_threadpool(manager.assignment, inst)
    if not all(access.allowed(Operation.READ, ResourceType.TOPIC, t) for t, _ in assigned):
        # a pattern may have matched topics the principal may not even Describe: name none of them
        raise Forbidden(f"{access.principal} is not authorized to Read every topic this consumer is assigned")
    batches = await run_in_threadpool(
        manager.poll,
        inst,
        None if timeout is None or timeout < 0 else timeout,
        None if max_bytes is None or max_bytes <= 0 else max_bytes,
    )
    read = {t for b in batches if b.num_rows for t in b.column("topic").unique().to_pylist()}
    if not all(access.allowed(Operation.READ, ResourceType.TOPIC, t) for t in read):
        # the assignment moved (a pattern matched a new topic) during the poll: return none of it
        raise Forbidden(f"{access.principal} is not authorized to Read every topic this consumer is assigned")
    body = _records_body(batches, fmt, request.app.state.schema_registry)
    return _json(body, media=media or (BINARY_V2 if fmt == "binary" else _FORMAT_MEDIA.get(fmt, JSON_V2)))


@router.post("/consumers/{group}/instances/{instance}/offsets", summary="Commit offsets (v2)")
async def commit_offsets(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=False, what="commit")
    offsets: dict[TopicPartition, tuple[int, str | None]] | None = None
    if doc is not None:
        key = (
            "offsets"
            if doc.get("offsets") is not None
            else "partitions"
            if doc.get("partitions") is not None
            else None
        )
        if key is not None:
            offsets = {}
            for i, raw in enumerate(_list(doc, key, "a commit")):
                where = f"{key}[{i}]"
                item = _item(raw, where)
                offset = _as_int(item.get("offset"), f"{where}.offset")
                if offset < -1:
                    raise _bad_request(f"{where}.offset must be -1 or more")
                meta = item.get("metadata")
                if meta is not None and not isinstance(meta, str):
                    raise _bad_request(f"{where}.metadata must be a string")
                # Confluent commits offset + 1: the body names the last record processed.
                offsets[_tp(item, where)] = (offset + 1, meta)
            access_of(request.scope).require_topics(Operation.READ, (t for t, _ in offsets))
    await run_in_threadpool(manager.commit, inst, offsets)
    return _json([])


@router.get("/consumers/{group}/instances/{instance}/offsets", summary="Committed offsets (v2)")
async def committed_offsets(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    inst = await run_in_threadpool(manager.get, group, instance)
    doc = await _body(request, settings, required=False, what="committed offsets")
    if doc is None or doc.get("partitions") is None:
        raise HTTPError(
            404,
            40402,
            "Partition not found: send the partitions to look up in the body",
            "partition_not_found",
        )
    partitions = _partitions(doc, "a committed offsets request")
    found = await run_in_threadpool(manager.committed, inst, partitions)
    access = access_of(request.scope)
    return _json(
        {
            "offsets": [
                {"topic": t, "partition": p, "offset": found[(t, p)][0], "metadata": found[(t, p)][1] or ""}
                for t, p in partitions
                if (t, p) in found and access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t)
            ]
        }
    )
