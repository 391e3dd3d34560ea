"""Confluent Kafka REST Proxy API v2: topics, partitions, offsets, brokers and produce.

Shapes, status codes and error codes follow Confluent's kafka-rest (``/topics``, ``/brokers``); consumer
instances live elsewhere. Produce accepts the ``json`` and ``binary`` embedded formats, and ``avro``,
``jsonschema`` and ``protobuf`` through the schema registry (:mod:`topiclake.schema_registry.rest_proxy`).
Request-level errors answer ``{"error_code", "message"}``; per-record errors fill that record's
``error_code``/``error`` while the other records are written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api import codec, http
from topiclake.api.auth import AccessDep
from topiclake.api.auto_create import ensure_topic
from topiclake.api.deps import BrokerDep, MetricsDep, SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.metrics import GatewayMetrics
from topiclake.platform import Broker, Record, RecordResult, TopicInfo, validate_topic_name
from topiclake.schema_registry import rest_proxy
from topiclake.settings import GatewaySettings

router = APIRouter(tags=["kafka-rest-v2"])

V2_JSON = "application/vnd.kafka.v2+json"
#: Response types a v2 client may ask for (Confluent's docs send all three in ``Accept``).
ACCEPTED = (V2_JSON, "application/vnd.kafka+json", "application/json")

#: Request media type -> embedded format. Confluent's docs: when the embedded format is omitted
#: (``application/vnd.kafka.v2+json``, ``application/vnd.kafka+json``, ``application/json``,
#: ``application/octet-stream``) ``binary`` is assumed.
PRODUCE_FORMATS: dict[str, str] = {
    "application/vnd.kafka.json.v2+json": "json",
    "application/vnd.kafka.binary.v2+json": "binary",
    V2_JSON: "binary",
    "application/vnd.kafka+json": "binary",
    "application/json": "binary",
    "application/octet-stream": "binary",
}
_SCHEMA_FORMATS = {
    "application/vnd.kafka.avro.v2+json": "avro",
    "application/vnd.kafka.jsonschema.v2+json": "jsonschema",
    "application/vnd.kafka.protobuf.v2+json": "protobuf",
}

# Confluent's codes for a record the producer could not write (kafka-rest AbstractProduceAction).
_KAFKA_ERROR = 50002
_KAFKA_RETRIABLE_ERROR = 50003
_AUTHENTICATION_ERROR = 40101
_AUTHORIZATION_ERROR = 40301
_SCHEMA_MISMATCH = 42203  # kafka-rest: a record that does not convert to its schema


async def _negotiate(request: Request) -> str:
    """Check ``Accept``; Confluent (Jersey) answers an unacceptable one 406 with error_code 406."""
    try:
        return http.negotiate(request, ACCEPTED)
    except HTTPError as exc:
        raise HTTPError(406, 406, exc.message, code="not_acceptable") from None


Accept = Annotated[str, Depends(_negotiate)]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=V2_JSON)


def _topic(broker: Broker, name: str) -> TopicInfo:
    """The topic's state; an illegal name cannot exist, so it is 'not found' as in Confluent."""
    try:
        validate_topic_name(name)
    except e.InvalidTopicName as exc:
        raise e.TopicNotFound(f"Topic not found: {exc.message}", topic=name[:60]) from None
    try:
        return broker.describe_topic(name)
    except e.TopicNotFound as exc:
        raise e.TopicNotFound(f"Topic not found: {name!r}", topic=name) from exc


def _partition_id(info: TopicInfo, raw: str) -> int:
    """A partition id from the path; not an integer or out of range is 404 40402 (JAX-RS does the same
    for an unparsable ``int`` path parameter)."""
    p = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 10 else -1
    if not 0 <= p < info.partitions:
        raise e.PartitionNotFound(
            f"Partition not found: topic {info.name!r} has no partition {raw[:20]!r} "
            f"(it has {info.partitions})",
            topic=info.name,
        )
    return p


def _partition_body(broker: Broker, topic: str, p: int) -> dict[str, Any]:
    state = broker.partition_state(topic, p)
    return {
        "partition": p,
        "leader": state.leader,
        "replicas": [
            {"broker": r, "leader": r == state.leader, "in_sync": r in state.isr} for r in state.replicas
        ],
    }


# ------------------------------------------------------------------ metadata


@router.get("/", summary="REST Proxy v2 root")
def root(_accept: Accept) -> Response:
    return _json({})


@router.get("/brokers", summary="Broker ids (v2)")
def list_brokers(broker: BrokerDep, _accept: Accept) -> Response:
    return _json({"brokers": [b.broker_id for b in broker.metadata().brokers]})


@router.get("/topics", summary="Topic names (v2)")
def list_topics(broker: BrokerDep, _accept: Accept, access: AccessDep) -> Response:
    return _json(access.visible(t.name for t in broker.list_topics()))


@router.get("/topics/{topic}", summary="Topic metadata: configs and partitions (v2)")
def get_topic(topic: str, broker: BrokerDep, _accept: Accept) -> Response:
    info = _topic(broker, topic)
    return _json(
        {
            "name": info.name,
            "configs": info.config.to_kafka(),
            "partitions": [_partition_body(broker, info.name, p) for p in range(info.partitions)],
        }
    )


@router.get("/topics/{topic}/partitions", summary="Partitions of a topic (v2)")
def list_partitions(topic: str, broker: BrokerDep, _accept: Accept) -> Response:
    info = _topic(broker, topic)
    return _json([_partition_body(broker, info.name, p) for p in range(info.partitions)])


@router.get("/topics/{topic}/partitions/{partition}", summary="One partition (v2)")
def get_partition(topic: str, partition: str, broker: BrokerDep, _accept: Accept) -> Response:
    info = _topic(broker, topic)
    return _json(_partition_body(broker, info.name, _partition_id(info, partition)))


@router.get("/topics/{topic}/partitions/{partition}/offsets", summary="Beginning and end offsets (v2)")
def get_offsets(topic: str, partition: str, broker: BrokerDep, _accept: Accept) -> Response:
    info = _topic(broker, topic)
    p = _partition_id(info, partition)
    return _json(
        {
            "beginning_offset": broker.list_offsets(topic, p, "earliest"),
            "end_offset": broker.list_offsets(topic, p, "latest"),
        }
    )


# ------------------------------------------------------------------ produce


def _embedded_format(request: Request) -> str:
    mt = http.media_type(request)
    fmt = PRODUCE_FORMATS.get(mt)
    if fmt is not None:
        return fmt
    if mt in _SCHEMA_FORMATS:
        return _SCHEMA_FORMATS[mt]
    if mt in _SCHEMA_FORMATS:
        message = (
            f"Content-Type {mt!r}: the {_SCHEMA_FORMATS[mt]} embedded format needs a schema registry, "
            "which this gateway does not have; send application/vnd.kafka.json.v2+json or "
            "application/vnd.kafka.binary.v2+json"
        )
    else:
        message = (
            f"unsupported Content-Type {mt or '(none)'!r}; send application/vnd.kafka.json.v2+json or "
            "application/vnd.kafka.binary.v2+json"
        )
    raise HTTPError(415, 415, message, code="unsupported_media_type")


def _bad_request(message: str) -> HTTPError:
    # Confluent answers unparsable JSON and wrongly typed fields 400 with error_code 400 (rest-utils'
    # JsonParseExceptionMapper/JsonMappingExceptionMapper, kafka-rest's BadRequestException).
    return HTTPError(400, 400, message, code="invalid_request")


def _record_partition(value: Any, i: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)  # Jackson coerces "1" to an Integer
    raise _bad_request(f"records[{i}].partition must be an integer, not {orjson.dumps(value).decode()[:40]}")


def _parse(body: bytes, fmt: str, partition: int | None) -> list[Record]:
    """Decode a v2 produce body into records (raises 400 or 422 as Confluent does, writing nothing)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _bad_request(f"request body must be a JSON object with 'records', not {type(doc).__name__}")
    raw = doc.get("records")
    if raw is not None and not isinstance(raw, list):
        raise _bad_request("'records' must be an array of {key, value, partition} objects")
    if not raw:
        # @NotEmpty on ProduceRequest.records: a constraint violation, 422 with error_code 422.
        raise HTTPError(422, 422, "records must not be empty", code="invalid_request")
    records: list[Record] = []
    append = records.append
    encode = codec.encode
    for i, r in enumerate(raw):
        if not isinstance(r, dict):
            raise _bad_request(f"records[{i}] must be an object with key, value and partition")
        try:
            key = encode(r.get("key"), fmt, what=f"records[{i}].key")
            value = encode(r.get("value"), fmt, what=f"records[{i}].value")
        except e.InvalidRecord as exc:
            raise _bad_request(f"Bad Request: {exc.message}") from None
        own = _record_partition(r.get("partition"), i)  # validated on both routes, as Jackson does
        append(Record(key=key, value=value, partition=own if partition is None else partition))
    return records


def _error_code(exc: e.TopiclakeError) -> int:
    """Confluent's per-record code for a producer exception (kafka-rest errorCodeFromProducerException)."""
    if isinstance(exc, e.Unauthorized):
        return _AUTHENTICATION_ERROR
    if isinstance(exc, e.Forbidden):
        return _AUTHORIZATION_ERROR
    if isinstance(exc, e.RecordSchemaMismatch):
        return _SCHEMA_MISMATCH
    return _KAFKA_RETRIABLE_ERROR if exc.retriable else _KAFKA_ERROR


_Answer = tuple[dict[str, Any], int, int, int]


def _answer(records: Sequence[Record], results: Sequence[RecordResult]) -> _Answer:
    """The v2 produce response, its HTTP status, and the count and bytes of the records written."""
    offsets: list[dict[str, Any]] = []
    written = nbytes = 0
    status = 200
    for rec, res in zip(records, results, strict=True):
        err = res.error
        if err is None:
            offsets.append(
                {
                    "partition": res.partition,
                    "offset": res.offset,
                    "timestamp": res.timestamp_ms,  # ms as stored (CreateTime or LogAppendTime); an addition
                    "error_code": None,
                    "error": None,
                }
            )
            written += 1
            nbytes += len(rec.key or b"") + len(rec.value or b"")
        else:
            code = _error_code(err)
            offsets.append({"partition": None, "offset": None, "error_code": code, "error": err.message})
            # Confluent (Utils.produceRequestStatus): 401/403 when a record failed on authentication/ACLs.
            if code == _AUTHENTICATION_ERROR:
                status = 401
            elif code == _AUTHORIZATION_ERROR and status != 401:
                status = 403
    return {"key_schema_id": None, "value_schema_id": None, "offsets": offsets}, status, written, nbytes


def _well_formed(body: bytes) -> bool:
    """Whether a v2 produce body is a JSON object with a non-empty ``records`` array (what every format
    needs before any record is looked at)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("records"), list) and bool(doc["records"])


def _produce(
    broker: Broker, topic: str, body: bytes, fmt: str, partition_raw: str | None, registry: Any = None
) -> _Answer:
    info = _topic(broker, topic)
    partition = None if partition_raw is None else _partition_id(info, partition_raw)
    if fmt in rest_proxy.EMBEDDED_FORMATS:
        done = rest_proxy.produce_v2(broker, registry, topic, body, fmt, partition)
        answer = _answer(done.records, done.results)
        answer[0].update(key_schema_id=done.key_schema_id, value_schema_id=done.value_schema_id)
        return answer
    records = _parse(body, fmt, partition)
    results = broker.produce(topic, records, partition=partition, acks="all")
    return _answer(records, results)


async def _produce_route(
    request: Request,
    topic: str,
    partition: str | None,
    broker: Broker,
    settings: GatewaySettings,
    metrics: GatewayMetrics,
) -> Response:
    started = time.perf_counter()
    fmt = _embedded_format(request)
    body = await http.read_body(request, settings.max_request_bytes)
    # created (auto.create.topics.enable) only for a body that can be records: a 4xx changes nothing
    if broker.open_log(topic) is None and broker.config.auto_create_topics_enable and _well_formed(body):
        await ensure_topic(request, broker, topic)
    registry = request.app.state.schema_registry
    answer, status, written, nbytes = await run_in_threadpool(
        _produce, broker, topic, body, fmt, partition, registry
    )
    metrics.produced(topic, written, nbytes, api="v2", acks="all", started=started)
    return _json(answer, status)


@router.post("/topics/{topic}", summary="Produce records to a topic (v2)")
async def produce_to_topic(
    request: Request,
    topic: str,
    broker: BrokerDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    _accept: Accept,
) -> Response:
    return await _produce_route(request, topic, None, broker, settings, metrics)


@router.post("/topics/{topic}/partitions/{partition}", summary="Produce records to one partition (v2)")
async def produce_to_partition(
    request: Request,
    topic: str,
    partition: str,
    broker: BrokerDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    _accept: Accept,
) -> Response:
    return await _produce_route(request, topic, partition, broker, settings, metrics)
