"""REST Proxy v2 produce with ``application/vnd.kafka.{avro,jsonschema}.v2+json``: records are validated,
stored in Confluent's wire format and read back by Confluent's deserializers; bad input writes nothing."""

from __future__ import annotations

import base64
import json

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registry_stack import Stack

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}


def _values(stack: Stack, topic: str) -> list[bytes | None]:
    fetched = stack.broker.fetch(topic, 0, 0, max_records=100)
    return fetched.records["value"].to_pylist()


def _post(url: str, topic: str, ctype: str, body: object) -> httpx.Response:
    return httpx.post(f"{url}/topics/{topic}", content=json.dumps(body), headers={"Content-Type": ctype})


def test_avro_records_over_rest_v2_read_back_by_confluents_deserializer(stack: Stack) -> None:
    stack.broker.create_topic("users")
    records = [{"value": {"name": "ada", "age": 36}}, {"value": {"name": "bob", "age": "x"}}]
    records.append({"value": {"name": "cy", "age": 7}})
    r = _post(stack.gateway_url, "users", AVRO_V2, {"value_schema": json.dumps(USER), "records": records})
    assert r.status_code == 200, r.text
    body = r.json()
    sid = body["value_schema_id"]
    assert sid == 1 and body["key_schema_id"] is None
    ok, bad, ok2 = body["offsets"]
    assert (ok["offset"], ok2["offset"]) == (0, 1) and ok["error_code"] is None
    assert bad["error_code"] == 42203 and "records[1]" in bad["error"] and bad["offset"] is None

    # by id, as a second request would
    r = _post(stack.gateway_url, "users", AVRO_V2, {"value_schema_id": sid, "records": [records[0]]})
    assert r.json()["offsets"][0]["offset"] == 2

    client = SchemaRegistryClient({"url": stack.registry_url})
    deserialize = AvroDeserializer(client)
    ctx = SerializationContext("users", MessageField.VALUE)
    values = _values(stack, "users")
    assert all(v is not None and v[:5] == b"\x00\x00\x00\x00\x01" for v in values)  # magic 0, id 1
    assert [deserialize(v, ctx) for v in values] == [
        {"name": "ada", "age": 36},
        {"name": "cy", "age": 7},
        {"name": "ada", "age": 36},
    ]


def test_confluent_serialized_records_produced_as_binary_and_json_schema_over_rest(stack: Stack) -> None:
    stack.broker.create_topic("events")
    client = SchemaRegistryClient({"url": stack.registry_url})
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
        "required": ["id"],
    }
    serialize = JSONSerializer(json.dumps(schema), client)
    ctx = SerializationContext("events", MessageField.VALUE)
    framed = serialize({"id": 1, "tag": "a"}, ctx)
    assert framed is not None
    b64 = base64.b64encode(framed).decode()
    r = _post(stack.gateway_url, "events", BINARY_V2, {"records": [{"value": b64}]})
    assert r.status_code == 200
    sid = client.get_latest_version("events-value").schema_id
    records = [{"value": {"id": 2}}, {"value": {"tag": "no id"}}]
    r = _post(stack.gateway_url, "events", JSONSCHEMA_V2, {"value_schema_id": sid, "records": records})
    offsets = r.json()["offsets"]
    assert offsets[0]["offset"] == 1 and offsets[1]["error_code"] == 42203
    assert "'id' is a required property" in offsets[1]["error"]
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    assert [deserialize(v, ctx) for v in _values(stack, "events")] == [{"id": 1, "tag": "a"}, {"id": 2}]


def test_bad_schema_input_is_refused_and_writes_nothing(stack: Stack) -> None:
    stack.broker.create_topic("t")
    one = [{"value": {"name": "a", "age": 1}}]
    url = stack.gateway_url
    r = _post(url, "t", AVRO_V2, {"value_schema_id": 99, "records": one})
    assert (r.status_code, r.json()["error_code"]) == (404, 40403)
    r = _post(url, "t", AVRO_V2, {"value_schema": '{"type": "recrd"}', "records": one})
    assert (r.status_code, r.json()["error_code"]) == (422, 42201)
    assert _post(url, "t", AVRO_V2, {"value_schema": json.dumps(USER), "records": one}).status_code == 200
    changed = {**USER, "fields": [{"name": "name", "type": "int"}, {"name": "age", "type": "int"}]}
    r = _post(url, "t", AVRO_V2, {"value_schema": json.dumps(changed), "records": [{"value": {"name": 1}}]})
    assert (r.status_code, r.json()["error_code"]) == (409, 409)
    r = _post(url, "t", AVRO_V2, {"value_schema_id": 1, "records": [{"value": {"nope": True}}]})
    assert r.status_code == 200 and r.json()["offsets"][0]["error_code"] == 42203
    assert len(_values(stack, "t")) == 1  # only the one good record
    assert httpx.get(f"{stack.registry_url}/subjects/t-value/versions").json() == [1]


def test_topic_requiring_schemas_refuses_records_without_a_registered_id(stack: Stack) -> None:
    stack.broker.create_topic("strict", configs={"confluent.value.schema.validation": "true"})
    assert stack.broker.describe_topic("strict").config.get("confluent.value.schema.validation") == "true"
    sid = stack.registry.register("strict-value", json.dumps(USER))
    good = stack.registry.parsed(sid)
    framed = b"\x00" + sid.to_bytes(4, "big") + good.encode({"name": "a", "age": 1})  # type: ignore[attr-defined]
    unknown = b"\x00" + (77).to_bytes(4, "big") + b"\x02a\x02"
    values = [framed, b"plain bytes", unknown, None]
    records = [{"value": base64.b64encode(v).decode() if v else None} for v in values]
    r = _post(stack.gateway_url, "strict", BINARY_V2, {"records": records})
    offsets = r.json()["offsets"]
    assert [o["offset"] for o in offsets] == [0, None, None, 1]  # a null value (tombstone) needs no schema
    assert "wire format" in offsets[1]["error"] and "schema id 77" in offsets[2]["error"]
    assert _values(stack, "strict") == [framed, None]
    # the REST Proxy's avro format frames records itself, so they pass
    r = _post(
        stack.gateway_url,
        "strict",
        AVRO_V2,
        {"value_schema_id": sid, "records": [{"value": {"name": "b", "age": 2}}]},
    )
    assert r.json()["offsets"][0]["offset"] == 2


def test_rest_v2_consumer_in_avro_format_reads_records_as_json(stack: Stack) -> None:
    stack.broker.create_topic("reads")
    client = SchemaRegistryClient({"url": stack.registry_url})
    ctx = SerializationContext("reads", MessageField.VALUE)
    framed = AvroSerializer(client, json.dumps(USER))({"name": "ada", "age": 36}, ctx)
    assert framed is not None
    _post(stack.gateway_url, "reads", BINARY_V2, {"records": [{"value": base64.b64encode(framed).decode()}]})
    body = {"value_schema_id": 1, "records": [{"value": {"name": "bob", "age": 7}}, {"value": None}]}
    assert _post(stack.gateway_url, "reads", AVRO_V2, body).status_code == 200

    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    base = f"{stack.gateway_url}/consumers/g"
    r = httpx.post(base, json={"name": "c", "format": "avro", "auto.offset.reset": "earliest"}, headers=v2)
    assert r.status_code == 200, r.text
    inst = f"{base}/instances/c"
    assert httpx.post(f"{inst}/subscription", json={"topics": ["reads"]}, headers=v2).status_code == 204
    got: list[dict[str, object]] = []
    for _ in range(50):  # bounded: a few long-polls while the group forms
        r = httpx.get(f"{inst}/records", params={"timeout": 500}, headers={"Accept": AVRO_V2}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith(AVRO_V2)
        got += r.json()
        if len(got) >= 3:
            break
    assert [(g["offset"], g["value"]) for g in got] == [
        (0, {"name": "ada", "age": 36}),
        (1, {"name": "bob", "age": 7}),
        (2, None),
    ]
    httpx.delete(inst, headers=v2)


def test_rest_v3_produce_with_schema_id_version_and_inline_schema(stack: Stack) -> None:
    stack.broker.create_topic("v3t")
    cluster = httpx.get(f"{stack.gateway_url}/v3/clusters").json()["data"][0]["cluster_id"]
    url = f"{stack.gateway_url}/v3/clusters/{cluster}/topics/v3t/records:batch"
    ada = {"name": "ada", "age": 36}
    entries = [
        {"id": "a", "value": {"type": "AVRO", "schema": json.dumps(USER), "data": ada}},
        {"id": "b", "value": {"schema_id": 1, "data": {"name": "bob", "age": 7}}},
        {"id": "c", "value": {"schema_version": 1, "subject_name_strategy": "TOPIC_NAME", "data": ada}},
        {"id": "d", "value": {"type": "AVRO", "data": {"name": 5}}},  # latest version; does not match
        {"id": "e", "value": {"schema_id": 42, "data": ada}},
    ]
    r = httpx.post(url, json={"entries": entries})
    body = r.json()
    assert [s["id"] for s in body["successes"]] == ["a", "b", "c"]
    assert body["successes"][2]["value"]["schema_version"] == 1
    assert body["successes"][0]["value"]["schema_id"] == 1
    assert {f["id"]: f["error_code"] for f in body["failures"]} == {"d": 42206, "e": 40403}
    client = SchemaRegistryClient({"url": stack.registry_url})
    deserialize = AvroDeserializer(client)
    ctx = SerializationContext("v3t", MessageField.VALUE)
    assert [deserialize(v, ctx)["name"] for v in _values(stack, "v3t")] == ["ada", "bob", "ada"]


ORDER_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  int64 id = 1;\n  string item = 2;\n}\n'


def _order_class() -> type:
    """shop.Order built by hand with the protobuf runtime, independent of topiclake's descriptor builder."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    m = f.message_type.add(name="Order")
    t = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="id", number=1, type=t.TYPE_INT64, label=t.LABEL_OPTIONAL)
    m.field.add(name="item", number=2, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_records_over_rest_v2_read_back_by_confluents_deserializer(stack: Stack) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    stack.broker.create_topic("orders")
    records = [{"value": {"id": 7, "item": "tea"}}, {"value": {"id": "seven"}}]
    body = {"value_schema": ORDER_PROTO, "records": records}
    r = _post(stack.gateway_url, "orders", "application/vnd.kafka.protobuf.v2+json", body)
    offsets = r.json()["offsets"]
    assert offsets[0]["offset"] == 0 and offsets[1]["error_code"] == 42203
    (value,) = _values(stack, "orders")
    assert value is not None and value[:6] == b"\x00\x00\x00\x00\x01\x00"  # magic, id 1, message index [0]
    deserialize = ProtobufDeserializer(_order_class(), {"use.deprecated.format": False})
    order = deserialize(value, SerializationContext("orders", MessageField.VALUE))
    assert (order.id, order.item) == (7, "tea")
    assert (
        httpx.get(f"{stack.registry_url}/subjects/orders-value/versions/1").json()["schemaType"] == "PROTOBUF"
    )


def test_native_api_produce_with_schema_ids(stack: Stack) -> None:
    stack.broker.create_topic("native")
    sid = stack.registry.register("native-value", json.dumps(USER))
    url = f"{stack.gateway_url}/v1/topics/native/records"
    records = [{"key": "k1", "value": {"name": "ada", "age": 36}}, {"key": "k2", "value": {"age": 1}}]
    r = httpx.post(url, json={"value_schema_id": sid, "records": records})
    results = r.json()["results"]
    assert results[0]["offset"] == 0 and results[0]["error"] is None
    assert results[1]["error"]["code"] == "record_schema_mismatch"
    fetched = stack.broker.fetch("native", 0, 0).records
    assert fetched["key"].to_pylist() == [b"k1"]  # a key without a schema id keeps the plain encoding
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": stack.registry_url}))
    value = fetched["value"].to_pylist()[0]
    assert deserialize(value, SerializationContext("native", MessageField.VALUE)) == {
        "name": "ada",
        "age": 36,
    }
    r = httpx.post(url, json={"value_schema_id": 404, "records": records})
    assert r.status_code == 404 and r.json()["error"]["code"] == "schema_not_found"


def test_confluents_protobuf_serializer_registers_and_round_trips(stack: Stack) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    stack.broker.create_topic("pb")
    client = SchemaRegistryClient({"url": stack.registry_url})
    order = _order_class()
    ctx = SerializationContext("pb", MessageField.VALUE)
    serialize = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    framed = serialize(order(id=5, item="cake"), ctx)  # registers a base64 FileDescriptorProto
    assert framed is not None
    _post(stack.gateway_url, "pb", BINARY_V2, {"records": [{"value": base64.b64encode(framed).decode()}]})
    # the REST Proxy writes with the registered schema too, and Confluent's deserializer (which fetches the
    # writer's schema with format=serialized) reads both
    body = {"value_schema_id": 1, "records": [{"value": {"id": 6, "item": "pie"}}]}
    assert _post(stack.gateway_url, "pb", "application/vnd.kafka.protobuf.v2+json", body).status_code == 200
    deserialize = ProtobufDeserializer(order, {"use.deprecated.format": False}, client)
    got = [deserialize(v, ctx) for v in _values(stack, "pb")]
    assert [(m.id, m.item) for m in got] == [(5, "cake"), (6, "pie")]


def test_rest_v2_keys_with_their_own_schema(stack: Stack) -> None:
    stack.broker.create_topic("keyed")
    body = {
        "key_schema": '{"type": "string"}',
        "value_schema": json.dumps(USER),
        "records": [{"key": "u1", "value": {"name": "ada", "age": 36}}, {"key": 5, "value": None}],
    }
    r = _post(stack.gateway_url, "keyed", AVRO_V2, body).json()
    assert (r["key_schema_id"], r["value_schema_id"]) == (1, 2)
    assert r["offsets"][0]["offset"] == 0 and r["offsets"][1]["error_code"] == 42203  # 5 is not a string
    assert httpx.get(f"{stack.registry_url}/subjects").json() == ["keyed-key", "keyed-value"]
    key = stack.broker.fetch("keyed", 0, 0).records["key"].to_pylist()[0]
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": stack.registry_url}))
    assert deserialize(key, SerializationContext("keyed", MessageField.KEY)) == "u1"
