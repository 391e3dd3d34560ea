"""Protobuf schemas that import well-known types and other registered subjects: Confluent's serializer and
deserializer against topiclake's registry, the REST Proxy's protobuf format, and clear errors for imports
that do not resolve."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2
from proto_messages import ADDRESS_PROTO, ORDER_PROTO_V1, order_class
from registry_stack import Stack

from topiclake.schema_registry.serde import deserialize

PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
CONF = {"use.deprecated.format": False}


def _post(stack: Stack, topic: str, ctype: str, body: object) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway_url}/topics/{topic}", content=json.dumps(body), headers={"Content-Type": ctype}
    )


def _values(stack: Stack, topic: str) -> list[bytes | None]:
    return stack.broker.fetch(topic, 0, 0, max_records=100).records["value"].to_pylist()


def _order(cls: type, i: int, **extra: object) -> object:
    msg = cls(id=i, ship_to={"city": "Oslo", "zip": -i}, tags=["a", "b"], card=f"c{i}", **extra)
    msg.at.FromSeconds(1_700_000_000 + i)
    msg.qty["tea"] = i
    msg.priority.value = i * 10
    msg.lines.add(sku=f"s{i}")
    msg.status = 1
    return msg


def test_confluents_serializer_registers_imports_and_reads_back_across_a_change(stack: Stack) -> None:
    stack.broker.create_topic("orders")
    client = SchemaRegistryClient({"url": stack.registry_url})
    ctx = SerializationContext("orders", MessageField.VALUE)
    v1, v2 = order_class(1), order_class(2)
    framed1 = ProtobufSerializer(v1, client, CONF)(_order(v1, 1), ctx)
    assert framed1 is not None and framed1[5] == 0  # message indexes [0]
    binary = {"records": [{"value": base64.b64encode(framed1).decode()}]}
    assert _post(stack, "orders", BINARY_V2, binary).status_code == 200
    # the imported file became its own subject, referenced by its import path; the well-known types did not
    subjects = httpx.get(f"{stack.registry_url}/subjects").json()
    assert subjects == ["common/address.proto", "orders-value"]
    latest = httpx.get(f"{stack.registry_url}/subjects/orders-value/versions/latest").json()
    assert latest["references"] == [
        {"name": "common/address.proto", "subject": "common/address.proto", "version": 1}
    ]
    # the REST Proxy writes with the same schema (imports resolved), from protobuf's JSON mapping
    record = {
        "id": 2,
        "at": "2023-11-14T22:13:22Z",
        "shipTo": {"city": "Bergen"},
        "priority": 20,
        "iban": "NO9",
    }
    body = {"value_schema_id": latest["id"], "records": [{"value": record}]}
    assert _post(stack, "orders", PROTOBUF_V2, body).json()["offsets"][0]["error_code"] is None
    framed3 = ProtobufSerializer(v2, client, CONF)(_order(v2, 3, note="fragile"), ctx)  # version 2 (BACKWARD)
    assert framed3 is not None
    assert httpx.get(f"{stack.registry_url}/subjects/orders-value/versions").json() == [1, 2]
    binary = {"records": [{"value": base64.b64encode(framed3).decode()}]}
    assert _post(stack, "orders", BINARY_V2, binary).status_code == 200

    read = ProtobufDeserializer(v2, CONF, client)
    got = [read(v, ctx) for v in _values(stack, "orders")]
    assert [m.id for m in got] == [1, 2, 3]
    assert [m.at.seconds for m in got] == [1_700_000_001, 1_700_000_002, 1_700_000_003]
    assert [m.ship_to.city for m in got] == ["Oslo", "Bergen", "Oslo"]
    assert [m.priority.value for m in got] == [10, 20, 30]
    assert [m.WhichOneof("pay") for m in got] == ["card", "iban", "card"]
    assert [m.note for m in got] == ["", "", "fragile"]
    assert dict(got[2].qty) == {"tea": 3} and got[2].lines[0].sku == "s3"
    # topiclake's own decoding (REST Proxy consumers) resolves the imports too
    decoded = deserialize(stack.registry, _values(stack, "orders")[0])
    assert decoded["at"] == "2023-11-14T22:13:21Z" and decoded["ship_to"] == {"city": "Oslo", "zip": -1}


def test_rest_v2_protobuf_schema_with_well_known_imports(stack: Stack) -> None:
    stack.broker.create_topic("events")
    schema = (
        'syntax = "proto3"; package ev; import "google/protobuf/timestamp.proto"; '
        'import "google/protobuf/wrappers.proto"; '
        "message Event { string name = 1; google.protobuf.Timestamp at = 2; "
        "google.protobuf.StringValue tag = 3; }"
    )
    records = [
        {"value": {"name": "boot", "at": "2024-05-06T07:08:09.5Z", "tag": "x"}},
        {"value": {"name": "bad", "at": "yesterday"}},
    ]
    r = _post(stack, "events", PROTOBUF_V2, {"value_schema": schema, "records": records})
    offsets = r.json()["offsets"]
    assert offsets[0]["offset"] == 0 and offsets[1]["error_code"] == 42203
    (value,) = _values(stack, "events")
    f = descriptor_pb2.FileDescriptorProto(name="ev.proto", package="ev", syntax="proto3")
    f.dependency.extend(["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"])
    m = f.message_type.add(name="Event")
    t = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="name", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    m.field.add(name="at", number=2, type=t.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    m.field.add(name="tag", number=3, type=t.TYPE_MESSAGE, type_name=".google.protobuf.StringValue")
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(f)
    event_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("ev.Event"))
    client = SchemaRegistryClient({"url": stack.registry_url})
    event = ProtobufDeserializer(event_cls, CONF, client)(
        value, SerializationContext("events", MessageField.VALUE)
    )
    assert (event.name, event.at.seconds, event.at.nanos, event.tag.value) == (
        "boot",
        1714979289,
        500_000_000,
        "x",
    )


def test_imports_that_do_not_resolve_are_refused_and_nothing_is_stored(stack: Stack) -> None:
    url = stack.registry_url

    def register(subject: str, schema: str, refs: list[dict[str, object]] | None = None) -> httpx.Response:
        body = {"schema": schema, "schemaType": "PROTOBUF", "references": refs or []}
        return httpx.post(f"{url}/subjects/{quote(subject, safe='')}/versions", json=body)  # '/' as %2F

    r = register("o-value", ORDER_PROTO_V1)  # no reference for common/address.proto
    assert r.status_code == 422 and r.json()["error_code"] == 42201
    assert "'common/address.proto'" in r.json()["message"] and "references" in r.json()["message"]
    ref = {"name": "common/address.proto", "subject": "common/address.proto", "version": 1}
    r = register("o-value", ORDER_PROTO_V1, [ref])  # a reference to a subject nobody registered
    assert r.status_code == 422 and "does not exist" in r.json()["message"]
    r = register("o-value", ORDER_PROTO_V1.replace("timestamp.proto", "timestmp.proto"))
    assert r.status_code == 422 and "google/protobuf/timestmp.proto" in r.json()["message"]
    r = register("o-value", 'syntax = "proto3"; message A { Missing m = 1; }')
    assert r.status_code == 422 and "'Missing'" in r.json()["message"]
    assert httpx.get(f"{url}/subjects").json() == []

    # the REST Proxy refuses such a value_schema before anything is written
    stack.broker.create_topic("t")
    bad = 'syntax = "proto3"; import "other/thing.proto"; message A { string s = 1; }'
    r = _post(stack, "t", PROTOBUF_V2, {"value_schema": bad, "records": [{"value": {"s": "x"}}]})
    assert (
        r.status_code == 422
        and r.json()["error_code"] == 42201
        and "other/thing.proto" in r.json()["message"]
    )
    assert _values(stack, "t") == []
    assert httpx.get(f"{url}/subjects").json() == []

    # with the reference registered, it parses; changing an imported type's field is incompatible
    assert register("common/address.proto", ADDRESS_PROTO).status_code == 200
    sid = register("o-value", ORDER_PROTO_V1, [ref]).json()["id"]
    # records written with the .proto text version read back by Confluent's deserializer, which fetches the
    # schema and its reference as descriptors (format=serialized)
    stack.broker.create_topic("o")
    record = {"id": 4, "at": "2024-01-01T00:00:00Z", "shipTo": {"city": "Rome", "zip": 3}, "status": "PAID"}
    r = _post(stack, "o", PROTOBUF_V2, {"value_schema_id": sid, "records": [{"value": record}]})
    assert r.json()["offsets"][0]["error_code"] is None, r.text
    (value,) = _values(stack, "o")
    client = SchemaRegistryClient({"url": url})
    got = ProtobufDeserializer(order_class(1), CONF, client)(
        value, SerializationContext("o", MessageField.VALUE)
    )
    assert (got.id, got.at.seconds, got.ship_to.city, got.ship_to.zip, got.status) == (
        4,
        1704067200,
        "Rome",
        3,
        1,
    )
    changed = ORDER_PROTO_V1.replace("google.protobuf.Timestamp at = 2;", "string at = 2;")
    r = register("o-value", changed, [ref])
    assert r.status_code == 409, r.text
    added = ORDER_PROTO_V1.replace("int64 id = 1;", "int64 id = 1;\n  string note = 10;")
    assert register("o-value", added, [ref]).status_code == 200
    assert httpx.get(f"{url}/subjects/o-value/versions").json() == [1, 2]
