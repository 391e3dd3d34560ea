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

import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake.api.auth import AccessDep, access_of
from topiclake.api.consumer_instances import (
    ConsumerInstanceManager,
    TopicPartition,
)
from topiclake.api.deps import SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.routes._v2_consumers_io import (
    _FORMAT_MEDIA,
    BINARY_V2,
    CONSUMES,
    JSON_V2,
    PRODUCES,
    READ_FORMATS,
    V2_JSON,
    Accept,
    Manager,
    _as_int,
    _as_str,
    _bad_request,
    _body,
    _instance_config,
    _item,
    _json,
    _list,
    _no_content,
    _partitions,
    _query_int,
    _read_format,
    _records_body,
    _timestamp_ms,
    _tp,
)
from topiclake.errors import Forbidden
from topiclake.security import Operation, ResourceType

router = APIRouter(tags=["kafka-rest-v2"])

#: The router, and the media types this module held before _v2_consumers_io.py (still importable from here).
__all__ = ["BINARY_V2", "CONSUMES", "JSON_V2", "PRODUCES", "READ_FORMATS", "V2_JSON", "router"]

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


@router.post(
    "/consumers/{group}/instances/{instance}/subscription", status_code=204, summary="Subscribe (v2)"
)
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


@router.post(
    "/consumers/{group}/instances/{instance}/assignments",
    status_code=204,
    summary="Assign partitions by hand (v2)",
)
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
    "/consumers/{group}/instances/{instance}/positions",
    status_code=204,
    summary="Seek to offsets or timestamps (v2)",
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
    "/consumers/{group}/instances/{instance}/positions/beginning",
    status_code=204,
    summary="Seek to the beginning (v2)",
)
async def seek_to_beginning(
    request: Request, group: str, instance: str, manager: Manager, settings: SettingsDep, _accept: Accept
) -> Response:
    return await _seek_to(request, group, instance, manager, settings, "beginning")


@router.post(
    "/consumers/{group}/instances/{instance}/positions/end", status_code=204, summary="Seek to the end (v2)"
)
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
