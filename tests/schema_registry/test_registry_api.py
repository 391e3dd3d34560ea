"""Confluent's SchemaRegistryClient (and plain HTTP) against topiclake's registry: register, evolve, refuse,
look up, delete, configure; errors carry Confluent's codes; the state lives in ``_system/schemas``."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from registry_stack import Stack

from topiclake.platform import Storage
from topiclake.schema_registry import SchemaRegistry

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "t",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
USER_BAD = {**USER_V1, "fields": [{"name": "name", "type": "int"}, {"name": "age", "type": "int"}]}


def _avro(doc: dict[str, object]) -> Schema:
    return Schema(json.dumps(doc), "AVRO")


def test_register_evolve_refuse_and_look_up_with_confluents_client(stack: Stack) -> None:
    client = SchemaRegistryClient({"url": stack.registry_url})
    id1 = client.register_schema("users-value", _avro(USER_V1))
    id2 = client.register_schema("users-value", _avro(USER_V2))
    assert id2 == id1 + 1
    assert client.register_schema("users-value", _avro(USER_V2)) == id2  # the same schema: the same id

    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", _avro(USER_BAD))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert "incompatible" in refused.value.error_message

    assert json.loads(client.get_schema(id1).schema_str) == USER_V1
    latest = client.get_latest_version("users-value")
    assert (latest.version, latest.schema_id) == (2, id2)
    assert client.get_versions("users-value") == [1, 2]
    assert client.get_subjects() == ["users-value"]
    found = client.lookup_schema("users-value", _avro(USER_V1))
    assert (found.version, found.schema_id) == (1, id1)
    assert client.test_compatibility("users-value", _avro(USER_BAD)) is False
    assert client.test_compatibility("users-value", _avro(USER_V2)) is True

    # a second subject with the same schema keeps its global id
    assert client.register_schema("other-value", _avro(USER_V1)) == id1

    # another registry over the same warehouse (another broker) agrees, and never reuses an id
    other = SchemaRegistry(Storage(str(stack.warehouse)))
    assert other.get_version("users-value", "latest").schema.schema_id == id2
    id3 = other.register("third-value", json.dumps({"type": "string"}))
    assert id3 == id2 + 1
    assert client.get_schema(id3).schema_str == '{"type": "string"}'


def test_errors_have_confluents_codes_and_nothing_is_stored(
    stack: Stack, registry_http: httpx.Client
) -> None:
    def post(path: str, body: object) -> httpx.Response:
        return registry_http.post(path, json=body)

    r = registry_http.get("/subjects/nope/versions")
    assert (r.status_code, r.json()["error_code"]) == (404, 40401)
    r = registry_http.get("/schemas/ids/999")
    assert (r.status_code, r.json()["error_code"]) == (404, 40403)
    r = post(
        "/subjects/s-value/versions", {"schema": '{"type": "record", "name": "X", "fields": [{"name": 1}]}'}
    )
    assert (r.status_code, r.json()["error_code"]) == (422, 42201)
    r = post("/subjects/s-value/versions", {"schema": "{not json"})
    assert (r.status_code, r.json()["error_code"]) == (422, 42201)
    assert registry_http.get("/subjects").json() == []

    assert post("/subjects/s-value/versions", {"schema": json.dumps(USER_V1)}).json() == {"id": 1}
    r = registry_http.get("/subjects/s-value/versions/7")
    assert (r.status_code, r.json()["error_code"]) == (404, 40402)
    r = registry_http.get("/subjects/s-value/versions/abc")
    assert (r.status_code, r.json()["error_code"]) == (422, 42202)
    r = post("/subjects/s-value", {"schema": json.dumps(USER_V2)})
    assert (r.status_code, r.json()["error_code"]) == (404, 40403)
    r = registry_http.put("/config/s-value", json={"compatibility": "SIDEWAYS"})
    assert (r.status_code, r.json()["error_code"]) == (422, 42203)
    r = post("/subjects/s-value/versions", {"schema": json.dumps(USER_BAD)})
    assert (r.status_code, r.json()["error_code"]) == (409, 409)
    r = post("/compatibility/subjects/s-value/versions/latest?verbose=true", {"schema": json.dumps(USER_BAD)})
    assert r.json()["is_compatible"] is False and r.json()["messages"]
    assert registry_http.get("/subjects/s-value/versions").json() == [1]  # nothing stored by the refusals


def test_levels_config_mode_and_deletes(stack: Stack, registry_http: httpx.Client) -> None:
    assert registry_http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert registry_http.put("/config/s", json={"compatibility": "none"}).json() == {"compatibility": "NONE"}
    assert registry_http.get("/config/s").json() == {"compatibilityLevel": "NONE"}
    r = registry_http.get("/config/t")
    assert r.json()["error_code"] == 40408
    assert registry_http.get("/config/t?defaultToGlobal=true").json() == {"compatibilityLevel": "BACKWARD"}
    for doc in (USER_V1, USER_BAD):  # NONE accepts anything
        assert registry_http.post("/subjects/s/versions", json={"schema": json.dumps(doc)}).status_code == 200

    # FORWARD: old readers must read new data; removing a field without a default breaks it
    registry_http.put("/config/f", json={"compatibility": "FORWARD"})
    registry_http.post("/subjects/f/versions", json={"schema": json.dumps(USER_V1)})
    fewer = {**USER_V1, "fields": USER_V1["fields"][:1]}
    r = registry_http.post("/subjects/f/versions", json={"schema": json.dumps(fewer)})
    assert r.status_code == 409
    # ...while BACKWARD allows it (the new reader ignores the writer's extra field)
    registry_http.put("/config/f", json={"compatibility": "BACKWARD"})
    assert registry_http.post("/subjects/f/versions", json={"schema": json.dumps(fewer)}).status_code == 200

    # soft delete hides the version; a permanent delete needs the soft one first
    r = registry_http.delete("/subjects/s/versions/1?permanent=true")
    assert r.json()["error_code"] == 40407
    assert registry_http.delete("/subjects/s/versions/1").json() == 1
    assert registry_http.get("/subjects/s/versions").json() == [2]
    assert registry_http.get("/subjects/s/versions?deleted=true").json() == [1, 2]
    assert registry_http.get("/schemas/ids/1").status_code == 200  # still readable by id
    assert registry_http.delete("/subjects/s").json() == [2]
    assert "s" not in registry_http.get("/subjects").json()
    assert registry_http.delete("/subjects/s?permanent=true").json() == [1, 2]
    assert registry_http.get("/subjects/s/versions?deleted=true").json()["error_code"] == 40401

    assert registry_http.put("/mode/f", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    r = registry_http.post("/subjects/f/versions", json={"schema": json.dumps(USER_V2)})
    assert (r.status_code, r.json()["error_code"]) == (422, 42205)
    assert registry_http.get("/schemas/types").json() == ["AVRO", "JSON", "PROTOBUF"]
    assert [(x["subject"], x["version"]) for x in registry_http.get("/schemas").json()] == [
        ("f", 1),
        ("f", 2),
    ]
    r = registry_http.get("/no/such/resource")
    assert (r.status_code, r.json()["error_code"]) == (404, 404)


def test_json_and_protobuf_schemas_and_references(registry_http: httpx.Client) -> None:
    v1 = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    v2 = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "string"}},
        "required": ["a"],
    }
    bad = {**v2, "required": ["a", "b"]}
    post = registry_http.post
    assert (
        post("/subjects/j/versions", json={"schema": json.dumps(v1), "schemaType": "JSON"}).status_code == 200
    )
    assert (
        post("/subjects/j/versions", json={"schema": json.dumps(v2), "schemaType": "JSON"}).status_code == 200
    )
    r = post("/subjects/j/versions", json={"schema": json.dumps(bad), "schemaType": "JSON"})
    assert r.status_code == 409 and "'b' is required" in r.json()["message"]
    r = post("/subjects/j/versions", json={"schema": '{"type": 5}', "schemaType": "JSON"})
    assert r.json()["error_code"] == 42201

    p1 = 'syntax = "proto3"; package p; message M { int32 a = 1; string b = 2; }'
    p2 = 'syntax = "proto3"; package p; message M { int64 a = 1; string c = 3; }'
    p3 = 'syntax = "proto3"; package p; message M { string a = 1; }'
    for text, status in ((p1, 200), (p2, 200), (p3, 409), ("message {", 422)):
        r = post("/subjects/p/versions", json={"schema": text, "schemaType": "PROTOBUF"})
        assert r.status_code == status, r.text
    assert registry_http.get("/subjects/p/versions/latest").json()["schemaType"] == "PROTOBUF"

    # an Avro schema that uses a named type of another subject
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "t",
        "fields": [{"name": "city", "type": "string"}],
    }
    assert post("/subjects/address/versions", json={"schema": json.dumps(address)}).status_code == 200
    person = {
        "type": "record",
        "name": "Person",
        "namespace": "t",
        "fields": [{"name": "home", "type": "t.Address"}],
    }
    refs = [{"name": "t.Address", "subject": "address", "version": 1}]
    r = post("/subjects/person/versions", json={"schema": json.dumps(person), "references": refs})
    assert r.status_code == 200, r.text
    pid = r.json()["id"]
    assert registry_http.get(f"/schemas/ids/{pid}").json()["references"] == refs
    assert registry_http.get("/subjects/address/versions/1/referencedby").json() == [pid]
    assert registry_http.delete("/subjects/address/versions/1").json()["error_code"] == 42206
    r = post("/subjects/person2/versions", json={"schema": json.dumps(person)})  # the reference is missing
    assert r.json()["error_code"] == 42201
