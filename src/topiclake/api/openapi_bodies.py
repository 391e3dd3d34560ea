"""Document, in the generated OpenAPI, the request bodies of the routes that read their body themselves.

The REST Proxy routes (v2 produce and consumers, v3 topics, configs, records and ACLs) parse their bodies
by hand — for speed, for Confluent's exact error answers and for the v2 media types — so FastAPI sees no
body model and publishes none. Clients generated from the schema, and the fuzzer
(tests/security/test_fuzz_api.py), then do not know what to send. This module adds each route's body in
Confluent's shape to the schema; the routes stay as they are and still answer Confluent's errors for a
body that does not fit.
"""

from __future__ import annotations

from typing import Any

from topiclake.api.openapi_errors import V2_MEDIA
from topiclake.security.acl import Operation, PatternType, Permission, ResourceType

_V3 = "/v3/clusters/{cluster_id}"
_V3_TOPIC = f"{_V3}/topics/{{topic_name}}"
_INSTANCE = "/consumers/{group}/instances/{instance}"

_INT = {"type": "integer"}
_STR = {"type": "string"}
_TOPIC_PARTITION: dict[str, Any] = {
    "type": "object",
    "required": ["topic", "partition"],
    "properties": {"topic": _STR, "partition": _INT},
}
_PARTITIONS: dict[str, Any] = {
    "type": "object",
    "required": ["partitions"],
    "properties": {"partitions": {"type": "array", "items": _TOPIC_PARTITION}},
}
_V2_RECORD: dict[str, Any] = {
    "type": "object",
    "description": "key and value: any JSON for the json format, base64 for binary, an object for the "
    "schema formats (with value_schema or value_schema_id).",
    "properties": {"key": {}, "value": {}, "partition": _INT},
}
_V2_PRODUCE: dict[str, Any] = {
    "type": "object",
    "required": ["records"],
    "properties": {
        "records": {"type": "array", "minItems": 1, "items": _V2_RECORD},
        "key_schema": _STR,
        "key_schema_id": _INT,
        "value_schema": _STR,
        "value_schema_id": _INT,
    },
}
_V2_CONSUMER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": _STR,
        "format": {"type": "string", "enum": ["binary", "json", "avro", "jsonschema", "protobuf"]},
        "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"]},
        "auto.commit.enable": {"type": "string", "enum": ["true", "false"]},
        "fetch.min.bytes": _INT,
        "consumer.request.timeout.ms": _INT,
    },
}
_V2_SUBSCRIPTION: dict[str, Any] = {
    "type": "object",
    "description": "topics, or topic_pattern (a regular expression), not both.",
    "properties": {"topics": {"type": "array", "items": _STR}, "topic_pattern": _STR},
}
_V2_SEEK: dict[str, Any] = {
    "type": "object",
    "description": "offsets, timestamps (milliseconds or ISO 8601), or both.",
    "properties": {
        "offsets": {
            "type": "array",
            "items": {**_TOPIC_PARTITION, "properties": {**_TOPIC_PARTITION["properties"], "offset": _INT}},
        },
        "timestamps": {
            "type": "array",
            "items": {**_TOPIC_PARTITION, "properties": {**_TOPIC_PARTITION["properties"], "timestamp": {}}},
        },
    },
}
_V2_COMMIT: dict[str, Any] = {
    "type": "object",
    "description": "Without a body: the instance's current positions are committed.",
    "properties": {
        "offsets": {
            "type": "array",
            "items": {
                **_TOPIC_PARTITION,
                "properties": {**_TOPIC_PARTITION["properties"], "offset": _INT, "metadata": _STR},
            },
        },
        "partitions": {"type": "array", "items": _TOPIC_PARTITION},
    },
}
_CONFIG: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "value": {"type": ["string", "null"]}},
}
_V3_CREATE_TOPIC: dict[str, Any] = {
    "type": "object",
    "required": ["topic_name"],
    "properties": {
        "topic_name": _STR,
        "partitions_count": _INT,
        "replication_factor": _INT,
        "configs": {"type": "array", "items": _CONFIG},
        "validate_only": {"type": "boolean"},
    },
}
_V3_ALTER: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "array",
            "items": {
                **_CONFIG,
                "properties": {
                    **_CONFIG["properties"],
                    "operation": {"type": "string", "enum": ["SET", "DELETE"]},
                },
            },
        },
        "validate_only": {"type": "boolean"},
    },
}
_V3_DATA: dict[str, Any] = {
    "type": "object",
    "description": "type BINARY (data in base64), JSON (any JSON) or STRING; without a type, BINARY.",
    "properties": {"type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "data": {}},
}
_V3_RECORD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "partition_id": _INT,
        "headers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": _STR, "value": {"type": ["string", "null"], "format": "byte"}},
            },
        },
        "key": _V3_DATA,
        "value": _V3_DATA,
        "timestamp": {"type": "string", "format": "date-time"},
    },
}
_ACL: dict[str, Any] = {
    "type": "object",
    "required": ["resource_type", "resource_name", "pattern_type", "principal", "operation", "permission"],
    "properties": {
        "resource_type": {"type": "string", "enum": list(ResourceType.__members__)},
        "resource_name": _STR,
        "pattern_type": {"type": "string", "enum": list(PatternType.__members__)},
        "principal": {"type": "string", "example": "User:alice"},
        "host": {"type": "string", "default": "*"},
        "operation": {"type": "string", "enum": list(Operation.__members__)},
        "permission": {"type": "string", "enum": list(Permission.__members__)},
    },
}

#: (method, path) -> (the body's schema, required, media types).
_JSON = ("application/json",)
_V2 = ("application/json", *V2_MEDIA)
BODIES: dict[tuple[str, str], tuple[dict[str, Any], bool, tuple[str, ...]]] = {
    ("post", "/topics/{topic}"): (_V2_PRODUCE, True, _V2),
    ("post", "/topics/{topic}/partitions/{partition}"): (_V2_PRODUCE, True, _V2),
    ("post", "/consumers/{group}"): (_V2_CONSUMER, False, _V2),
    ("post", f"{_INSTANCE}/subscription"): (_V2_SUBSCRIPTION, True, _V2),
    ("post", f"{_INSTANCE}/assignments"): (_PARTITIONS, True, _V2),
    ("post", f"{_INSTANCE}/positions"): (_V2_SEEK, True, _V2),
    ("post", f"{_INSTANCE}/positions/beginning"): (_PARTITIONS, True, _V2),
    ("post", f"{_INSTANCE}/positions/end"): (_PARTITIONS, True, _V2),
    ("post", f"{_INSTANCE}/offsets"): (_V2_COMMIT, False, _V2),
    ("post", f"{_V3}/topics"): (_V3_CREATE_TOPIC, True, _JSON),
    ("patch", _V3_TOPIC): (
        {"type": "object", "required": ["partitions_count"], "properties": {"partitions_count": _INT}},
        True,
        _JSON,
    ),
    ("post", f"{_V3_TOPIC}/configs:alter"): (_V3_ALTER, True, _JSON),
    ("put", f"{_V3_TOPIC}/configs/{{name}}"): (
        {"type": "object", "required": ["value"], "properties": {"value": {"type": ["string", "null"]}}},
        True,
        _JSON,
    ),
    ("post", f"{_V3_TOPIC}/records"): (_V3_RECORD, True, _JSON),
    ("post", f"{_V3_TOPIC}/records:batch"): (
        {
            "type": "object",
            "required": ["entries"],
            "properties": {
                "entries": {
                    "type": "array",
                    "items": {**_V3_RECORD, "properties": {**_V3_RECORD["properties"], "id": _STR}},
                }
            },
        },
        True,
        _JSON,
    ),
    ("post", f"{_V3}/acls"): (_ACL, True, _JSON),
    ("post", f"{_V3}/acls:batch"): (
        {"type": "object", "required": ["data"], "properties": {"data": {"type": "array", "items": _ACL}}},
        True,
        _JSON,
    ),
}


def add_request_bodies(schema: dict[str, Any]) -> dict[str, Any]:
    """Document the request bodies the routes read by hand (in place; returned for chaining). A route
    that documents its own body keeps it."""
    for (method, path), (body, required, media) in BODIES.items():
        op = schema.get("paths", {}).get(path, {}).get(method)
        if op is not None and "requestBody" not in op:
            op["requestBody"] = {"required": required, "content": {m: {"schema": body} for m in media}}
    return schema
