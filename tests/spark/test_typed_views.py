"""Typed views: records written by Confluent's serializers (and by the REST Proxy's avro/jsonschema formats)
through a real gateway and registry read back in SQL field by field, across a schema change."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.process.ports import free_port
from topiclake.schema_registry import SchemaRegistry
from topiclake.schema_registry.http import create_registry_app
from topiclake.settings import GatewaySettings
from topiclake.spark.catalog import register_tables

USER_V1 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
EMAIL = {"name": "email", "type": ["null", "string"], "default": None}
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], EMAIL]}
EVENT_V1 = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
EVENT_V2 = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}}}


@pytest.fixture
def urls(warehouse: str) -> Iterator[tuple[str, str]]:
    """(gateway URL, registry URL) of real servers over the warehouse."""
    port, registry_port = free_port(), free_port()
    settings = GatewaySettings(warehouse=warehouse, port=port, schema_registry_port=registry_port)
    storage = Storage(warehouse)
    broker = Broker(storage, BrokerConfig(linger_ms=1.0, maintenance=False))
    registry = SchemaRegistry(storage)
    apps = [(create_app(settings, broker, registry), port), (create_registry_app(registry), registry_port)]
    servers = [
        uvicorn.Server(uvicorn.Config(a, host="127.0.0.1", port=p, log_level="warning")) for a, p in apps
    ]
    threads = [threading.Thread(target=s.run, daemon=True) for s in servers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while not all(s.started for s in servers):
        assert time.monotonic() < deadline, "servers did not start"
        time.sleep(0.02)
    broker.create_topic("users")
    broker.create_topic("events")
    broker.create_topic("people")
    try:
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{registry_port}"
    finally:
        for s in servers:
            s.should_exit = True
        for t in threads:
            t.join(10)
        broker.close()


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data else None


def _binary(
    gateway: str, topic: str, framed: list[bytes | None], keys: list[bytes | None] | None = None
) -> None:
    keys = keys or [None] * len(framed)
    records = [{"key": _b64(k), "value": _b64(f)} for k, f in zip(keys, framed, strict=True)]
    r = httpx.post(
        f"{gateway}/topics/{topic}",
        json={"records": records},
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    assert r.status_code == 200 and all(o["error_code"] is None for o in r.json()["offsets"]), r.text


@pytest.mark.slow
def test_typed_views_decode_each_record_with_its_own_schema(
    spark: SparkSession, warehouse: str, urls: tuple[str, str], tmp_path: Path
) -> None:
    gateway, registry_url = urls
    client = SchemaRegistryClient({"url": registry_url})
    users = SerializationContext("users", MessageField.VALUE)
    v1 = AvroSerializer(client, json.dumps(USER_V1))
    _binary(gateway, "users", [v1({"name": "ada", "age": 36}, users), v1({"name": "bob", "age": 7}, users)])
    v2 = AvroSerializer(client, json.dumps(USER_V2))  # registers version 2: a field with a default
    _binary(gateway, "users", [v2({"name": "cy", "age": 1, "email": "cy@x"}, users), None])
    r = httpx.post(  # the REST Proxy's avro format, by the latest schema id
        f"{gateway}/topics/users",
        json={"value_schema_id": 2, "records": [{"value": {"name": "di", "age": 2, "email": None}}]},
        headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
    )
    assert r.json()["offsets"][0]["offset"] == 4

    events = SerializationContext("events", MessageField.VALUE)
    event_keys = SerializationContext("events", MessageField.KEY)
    e1 = JSONSerializer(json.dumps(EVENT_V1), client)
    e2 = JSONSerializer(json.dumps(EVENT_V2), client)
    k = AvroSerializer(client, json.dumps({"type": "long"}))  # registers events-key
    values = [e1({"id": 1}, events), e2({"id": 2, "tags": ["a", "b"]}, events)]
    _binary(gateway, "events", values, [k(10, event_keys), k(20, event_keys)])

    # a schema that uses a named type of another subject (a reference) is expanded for from_avro
    city = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]}
    httpx.post(f"{registry_url}/subjects/address/versions", json={"schema": json.dumps(city)})
    refs = [{"name": "Address", "subject": "address", "version": 1}]
    body = {"schema": json.dumps(person), "references": refs}
    pid = httpx.post(f"{registry_url}/subjects/people-value/versions", json=body).json()["id"]
    home = {"value_schema_id": pid, "records": [{"value": {"home": {"city": "Oslo"}}}]}
    r = httpx.post(
        f"{gateway}/topics/people", json=home, headers={"Content-Type": "application/vnd.kafka.avro.v2+json"}
    )
    assert r.json()["offsets"][0]["offset"] == 0, r.text

    result = register_tables(spark, warehouse)
    assert result.typed_views == {
        "users": "topiclake.users_typed",
        "events": "topiclake.events_typed",
        "people": "topiclake.people_typed",
    }
    assert spark.sql("SELECT home.city FROM topiclake.people_typed").first()[0] == "Oslo"

    rows = spark.sql(
        "SELECT offset, name, age, email, value_schema_id FROM topiclake.users_typed ORDER BY offset"
    ).collect()
    assert [tuple(r) for r in rows] == [
        (0, "ada", 36, None, 1),
        (1, "bob", 7, None, 1),
        (2, "cy", 1, "cy@x", 2),
        (3, None, None, None, None),  # a tombstone
        (4, "di", 2, None, 2),
    ]
    columns = spark.table("topiclake.users_typed").columns
    assert columns[:6] == ["partition", "offset", "timestamp", "timestampType", "headers", "key"]
    assert spark.sql("SELECT avg(age) FROM topiclake.users_typed WHERE email IS NULL").first()[0] == 15.0

    rows = spark.sql("SELECT offset, key, id, tags FROM topiclake.events_typed ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, 10, 1, None), (1, 20, 2, ["a", "b"])]
    assert "key_schema_id" in spark.table("topiclake.events_typed").columns

    # registering another warehouse drops these views with their topics' tables (and cleans the session)
    (tmp_path / "empty").mkdir()
    register_tables(spark, str(tmp_path / "empty"))
    assert not [t.name for t in spark.catalog.listTables("topiclake") if t.name.endswith("_typed")]
