"""REST Proxy v2 produce with the schema formats: ``application/vnd.kafka.{avro,jsonschema}.v2+json``.

The body is Confluent's: ``records`` plus ``value_schema`` (a schema to register under ``<topic>-value``) or
``value_schema_id``, and the same for keys. Each record is validated against its schema; one that does not
match gets its own error (HTTP routes answer it with error_code 42203) while the others are written, in
Confluent's wire format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from topiclake.errors import InvalidRequest, RecordSchemaMismatch, SchemaMissing, TopiclakeError
from topiclake.platform import Broker, Record, RecordResult
from topiclake.schema_registry.registry import SchemaRegistry
from topiclake.schema_registry.serde import EMBEDDED_FORMATS, deserialize, serialize, subject_for
from topiclake.schema_registry.serde import serialize as serialize_one

__all__ = [
    "EMBEDDED_FORMATS",
    "V3_SCHEMA_FIELDS",
    "SchemaProduce",
    "decoder",
    "encode_v3",
    "is_schema_data",
    "native_serializer",
    "produce_v2",
]


@dataclass
class SchemaProduce:
    """What a schema-format produce did: one record and result per input record, and the schema ids."""

    records: list[Record]
    results: list[RecordResult]
    key_schema_id: int | None
    value_schema_id: int | None


def _schema_id(
    registry: SchemaRegistry, doc: dict[str, Any], topic: str, fmt: str, is_key: bool
) -> int | None:
    side = "key" if is_key else "value"
    given_id = doc.get(f"{side}_schema_id")
    text = doc.get(f"{side}_schema")
    if given_id is not None:
        if not isinstance(given_id, int) or isinstance(given_id, bool):
            raise InvalidRequest(f"{side}_schema_id must be an integer")
        registry.schema_by_id(given_id)  # SchemaNotFound (40403) when unknown
        return given_id
    if text is None:
        return None
    if not isinstance(text, str):
        text = orjson.dumps(text).decode()  # a schema sent as a JSON object
    return registry.register(subject_for(topic, is_key), text, EMBEDDED_FORMATS[fmt])


def produce_v2(
    broker: Broker,
    registry: SchemaRegistry,
    topic: str,
    body: bytes,
    fmt: str,
    partition: int | None,
) -> SchemaProduce:
    """Validate, serialize and produce a v2 schema-format body (``fmt``: avro, jsonschema or protobuf).

    Raises:
        InvalidRequest: the body is malformed, or a record has a key or value but no schema is given.
        SchemaNotFound, InvalidSchema, IncompatibleSchema: from the schema ids or schemas given.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list) or not doc["records"]:
        raise InvalidRequest("request body must be an object with a non-empty 'records' array")
    raw: list[Any] = doc["records"]
    key_id = _schema_id(registry, doc, topic, fmt, is_key=True)
    value_id = _schema_id(registry, doc, topic, fmt, is_key=False)
    good: list[Record] = []
    slots: list[int] = []
    results: list[RecordResult | None] = [None] * len(raw)
    records: list[Record] = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict):
            raise InvalidRequest(f"records[{i}] must be an object with key, value and partition")
        own = r.get("partition")
        if own is not None and (not isinstance(own, int) or isinstance(own, bool)):
            raise InvalidRequest(f"records[{i}].partition must be an integer")
        try:
            key = _encode(registry, key_id, r.get("key"), "key")
            value = _encode(registry, value_id, r.get("value"), "value")
        except RecordSchemaMismatch as exc:
            error: TopiclakeError = RecordSchemaMismatch(f"records[{i}]: {exc.message}", topic=topic)
            results[i] = RecordResult(None, None, None, error)
            records.append(Record(None, None))
            continue
        record = Record(key=key, value=value, partition=own if partition is None else partition)
        records.append(record)
        good.append(record)
        slots.append(i)
    if good:
        written = broker.produce(topic, good, partition=partition, acks="all")
        for slot, result in zip(slots, written, strict=True):
            results[slot] = result
    return SchemaProduce(records, [r for r in results if r is not None], key_id, value_id)


def _encode(registry: SchemaRegistry, schema_id: int | None, value: Any, side: str) -> bytes | None:
    if value is None:
        return None
    if schema_id is None:
        raise SchemaMissing(
            f"Request includes {side}s but does not include {side}_schema or {side}_schema_id"
        )
    return serialize(registry, schema_id, value)


def decoder(registry: SchemaRegistry) -> Callable[[bytes | None, str], Any]:
    """A ``decode(data, fmt)`` for REST Proxy reads in the avro and jsonschema formats: the JSON value of a
    record in Confluent's wire format (raises :class:`RecordSchemaMismatch` for one that does not decode)."""

    def decode(data: bytes | None, fmt: str) -> Any:
        del fmt  # the schema id in the record says how to read it
        return deserialize(registry, data)

    return decode


#: Fields of a v3 key or value that name a schema (Confluent's ``ProduceRequestData``).
V3_SCHEMA_FIELDS = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")
_V3_TYPES = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}


def is_schema_data(obj: Any) -> bool:
    """Whether a v3 key or value (``{"type", "data", ...}``) is in a schema format."""
    if not isinstance(obj, dict):
        return False
    kind = obj.get("type")
    return (isinstance(kind, str) and kind.upper() in _V3_TYPES) or any(
        obj.get(f) is not None for f in V3_SCHEMA_FIELDS
    )


def encode_v3(
    registry: SchemaRegistry, topic: str, obj: dict[str, Any], is_key: bool
) -> tuple[bytes | None, dict[str, Any]]:
    """Serialize a v3 key or value with its schema: ``schema_id``; or ``schema`` (registered under the
    subject); or ``schema_version`` (``latest`` when absent) of ``subject`` or the subject the
    ``subject_name_strategy`` gives (TOPIC_NAME by default).

    Returns:
        The framed bytes, and what the delivery report says about them (type, schema id and version,
        subject).

    Raises:
        InvalidRequest, SchemaNotFound, SubjectNotFound, SchemaVersionNotFound, InvalidSchema,
        IncompatibleSchema, RecordSchemaMismatch.
    """
    kind = str(obj.get("type") or "").upper()
    strategy = obj.get("subject_name_strategy") or "TOPIC_NAME"
    subject = obj.get("subject")
    if subject is None and obj.get("schema_id") is None:
        if str(strategy).upper() != "TOPIC_NAME":
            raise InvalidRequest(
                f"subject_name_strategy {strategy!r} needs a 'subject' or a 'schema_id' here"
            )
        subject = subject_for(topic, is_key)
    version: int | None = None
    if obj.get("schema_id") is not None:
        sid = obj["schema_id"]
        if not isinstance(sid, int) or isinstance(sid, bool):
            raise InvalidRequest("schema_id must be an integer")
        registry.schema_by_id(sid)
    elif obj.get("schema") is not None:
        text = obj["schema"] if isinstance(obj["schema"], str) else orjson.dumps(obj["schema"]).decode()
        sid = registry.register(str(subject), text, _V3_TYPES.get(kind, "AVRO"))
    else:
        found = registry.get_version(str(subject), obj.get("schema_version") or "latest")
        sid, version = found.schema.schema_id, found.version
    data = obj.get("data")
    framed = None if data is None else serialize(registry, sid, data)
    info: dict[str, Any] = {"type": kind or registry.schema_by_id(sid).schema_type, "schema_id": sid}
    if version is not None:
        info["schema_version"] = version
    if subject is not None:
        info["subject"] = subject
    return framed, info


def native_serializer(
    registry: SchemaRegistry, key_schema_id: Any, value_schema_id: Any
) -> Callable[[Any, bool], bytes | None] | None:
    """For the native API's JSON produce: ``serialize(data, is_key)`` framing keys and values with the
    schema ids a body names (``key_schema_id``, ``value_schema_id``), or None when it names none. A side
    without an id keeps the plain JSON encoding.

    Raises:
        InvalidRequest: an id is not an integer.
        SchemaNotFound: an id is not registered.
    """
    ids: dict[bool, int | None] = {}
    for is_key, raw in ((True, key_schema_id), (False, value_schema_id)):
        if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool)):
            raise InvalidRequest(f"{'key' if is_key else 'value'}_schema_id must be an integer")
        if raw is not None:
            registry.schema_by_id(raw)
        ids[is_key] = raw
    if ids[True] is None and ids[False] is None:
        return None

    def serialize(data: Any, is_key: bool) -> bytes | None:
        sid = ids[is_key]
        if data is None:
            return None
        if sid is None:
            return data.encode() if is_key and isinstance(data, str) else orjson.dumps(data)
        return serialize_one(registry, sid, data)

    return serialize
