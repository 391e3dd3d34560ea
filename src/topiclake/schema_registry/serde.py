"""Records in Confluent's wire format: serialize a JSON value with a registered schema, and back.

Used by the REST Proxy's schema formats (``avro``, ``jsonschema``) and by the topic config
``confluent.value.schema.validation``. Protobuf records are written as the schema file's first message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from topiclake.errors import InvalidRequest, RecordSchemaMismatch
from topiclake.platform.catalog.topic_config import TopicConfig
from topiclake.schema_registry._avro import AvroSchema
from topiclake.schema_registry._jsonschema import JsonSchema
from topiclake.schema_registry._parsed import ParsedSchema
from topiclake.schema_registry.errors import SchemaNotFound
from topiclake.schema_registry.registry import SchemaRegistry
from topiclake.schema_registry.wire import decode_wire, encode_wire, schema_id_of

if TYPE_CHECKING:
    from topiclake.schema_registry.protobuf import ProtobufSchema

__all__ = [
    "EMBEDDED_FORMATS",
    "check_records",
    "deserialize",
    "serialize",
    "subject_for",
    "valid_schema_id",
]

#: REST Proxy embedded format -> schema type.
EMBEDDED_FORMATS: Final = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}


def subject_for(topic: str, is_key: bool, strategy: str = "TopicNameStrategy", record_name: str = "") -> str:
    """The subject of a topic's keys or values under a subject name strategy."""
    if strategy in ("TopicNameStrategy", "TOPIC_NAME", "topic_name"):
        return f"{topic}-{'key' if is_key else 'value'}"
    if strategy in ("RecordNameStrategy", "RECORD_NAME", "record_name"):
        return record_name
    if strategy in ("TopicRecordNameStrategy", "TOPIC_RECORD_NAME", "topic_record_name"):
        return f"{topic}-{record_name}"
    raise InvalidRequest(f"unknown subject name strategy {strategy!r}")


def _codec(parsed: ParsedSchema) -> AvroSchema | JsonSchema | ProtobufSchema | None:
    """The schema as one that encodes and decodes records, if it is one. The protobuf module (its parser
    costs ~0.4 s of a broker's start) is imported only once a protobuf schema exists: it parsed one."""
    if isinstance(parsed, (AvroSchema, JsonSchema)):
        return parsed
    if parsed.schema_type == "PROTOBUF":
        from topiclake.schema_registry.protobuf import ProtobufSchema

        if isinstance(parsed, ProtobufSchema):
            return parsed
    return None


def serialize(registry: SchemaRegistry, schema_id: int, value: Any) -> bytes:
    """Validate ``value`` against the schema and frame its encoding with the id.

    Raises:
        SchemaNotFound: no schema has this id.
        RecordSchemaMismatch: the value does not match it.
    """
    parsed = registry.parsed(schema_id)
    codec = _codec(parsed)
    if codec is not None:
        return encode_wire(schema_id, codec.encode(value))
    raise RecordSchemaMismatch(
        f"schema {schema_id} is {parsed.schema_type}, which topiclake cannot serialize"
    )


def deserialize(registry: SchemaRegistry, data: bytes | None) -> Any:
    """The JSON value of a framed record (None stays None).

    Raises:
        RecordSchemaMismatch: not in the wire format, an unknown schema id, or a payload that does not decode.
    """
    if data is None:
        return None
    sid, payload = decode_wire(data)
    try:
        parsed = registry.parsed(sid)
    except SchemaNotFound as exc:
        raise RecordSchemaMismatch(f"record names schema id {sid}, which is not registered") from exc
    codec = _codec(parsed)
    try:
        if codec is not None:
            return codec.decode(payload)
    except Exception as exc:  # fastavro and json raise many kinds for a corrupt payload
        raise RecordSchemaMismatch(f"record does not decode with schema {sid}: {exc}") from exc
    raise RecordSchemaMismatch(f"schema {sid} is {parsed.schema_type}, which topiclake does not decode")


def valid_schema_id(registry: SchemaRegistry, data: bytes | None) -> str | None:
    """Why ``data`` is not a record framed with a registered schema id (None: it is)."""
    if data is None:
        return None
    sid = schema_id_of(data)
    if sid is None:
        return "the record is not in the schema registry wire format (magic byte 0, 4-byte schema id)"
    try:
        registry.schema_by_id(sid)
    except SchemaNotFound:
        return f"the record names schema id {sid}, which is not registered"
    return None


def check_records(registry: SchemaRegistry, topic: str, config: TopicConfig, table: pa.Table) -> list[Any]:
    """Confluent's broker-side schema validation: one :class:`RecordSchemaMismatch` or None per row.

    A value (key) must be null or framed with a schema id that the registry knows when the topic has
    ``confluent.value.schema.validation`` (``confluent.key.schema.validation``) set to ``true``.
    """
    errors: list[Any] = [None] * table.num_rows
    sides = [
        (side, table[side].to_pylist())
        for side, flag in (
            ("value", config.confluent_value_schema_validation),
            ("key", config.confluent_key_schema_validation),
        )
        if flag == "true" and side in table.column_names
    ]
    seen: dict[int | None, str | None] = {}  # one registry lookup per schema id per batch
    for side, column in sides:
        for i, data in enumerate(column):
            if errors[i] is None:
                sid = schema_id_of(data)
                if data is None or sid not in seen:
                    why = valid_schema_id(registry, data)
                    if data is not None:
                        seen[sid] = why
                else:
                    why = seen[sid]
                if why is not None:
                    errors[i] = RecordSchemaMismatch(
                        f"topic {topic} requires a registered schema for its {side}s "
                        f"(confluent.{side}.schema.validation=true): {why}",
                        topic=topic,
                    )
    return errors
