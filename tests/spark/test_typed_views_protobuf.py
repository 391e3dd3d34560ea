"""Typed views of Protobuf topics: records written by Confluent's ProtobufSerializer (with imports of
well-known types and of another registered subject) and by the REST Proxy's protobuf format read back in
SQL field by field, each with the schema version it was written with, across a schema change."""

from __future__ import annotations

import base64
import datetime as dt
import sys
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pyspark.sql import SparkSession

from topiclake.spark.catalog import register_tables

sys.path.insert(0, str(Path(__file__).parents[1] / "schema_registry"))
from proto_messages import order_class
from registry_stack import running_stack

CONF = {"use.deprecated.format": False}


def _key_class() -> type:
    """``shop.OrderKey``: every scalar kind the SQL decoder reads from the wire."""
    f = descriptor_pb2.FileDescriptorProto(name="shop/key.proto", package="shop", syntax="proto3")
    m = f.message_type.add(name="OrderKey")
    t = descriptor_pb2.FieldDescriptorProto
    kinds = [
        ("region", t.TYPE_STRING),
        ("n", t.TYPE_UINT64),
        ("f", t.TYPE_FLOAT),
        ("d", t.TYPE_DOUBLE),
        ("fx", t.TYPE_FIXED64),
        ("sf", t.TYPE_SFIXED32),
        ("ok", t.TYPE_BOOL),
        ("raw", t.TYPE_BYTES),
        ("neg", t.TYPE_INT32),
    ]
    for number, (name, kind) in enumerate(kinds, start=1):
        m.field.add(name=name, number=number, type=kind, label=t.LABEL_OPTIONAL)
    m.field.add(name="nums", number=10, type=t.TYPE_SINT64, label=t.LABEL_REPEATED)  # packed
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.OrderKey"))


def _ping_class() -> type:
    """``t.Ping``, the second message of its file: the first (``Meta``) is a helper that ``Ping`` uses."""
    f = descriptor_pb2.FileDescriptorProto(name="ping.proto", package="t", syntax="proto3")
    t = descriptor_pb2.FieldDescriptorProto
    meta = f.message_type.add(name="Meta")
    meta.field.add(name="host", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    ping = f.message_type.add(name="Ping")
    ping.field.add(name="meta", number=1, type=t.TYPE_MESSAGE, type_name=".t.Meta", label=t.LABEL_OPTIONAL)
    ping.field.add(name="n", number=2, type=t.TYPE_INT32, label=t.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Ping"))


def _post(gateway: str, ctype: str, body: object, topic: str = "orders") -> httpx.Response:
    r = httpx.post(f"{gateway}/topics/{topic}", json=body, headers={"Content-Type": ctype})
    assert r.status_code == 200 and all(o["error_code"] is None for o in r.json()["offsets"]), r.text
    return r


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


@pytest.mark.slow
def test_protobuf_typed_view_decodes_each_record_with_its_own_version(
    spark: SparkSession, warehouse: str
) -> None:
    with running_stack(Path(warehouse), kafka=True) as stack:
        stack.broker.create_topic("orders")
        client = SchemaRegistryClient({"url": stack.registry_url})
        values = SerializationContext("orders", MessageField.VALUE)
        keys = SerializationContext("orders", MessageField.KEY)
        v1, v2, key = order_class(1), order_class(2), _key_class()
        order = v1(id=1, tags=["a", "b"], card="c1", status=1, ship_to={"city": "Oslo", "zip": -1})
        order.at.FromSeconds(1_700_000_000)
        order.at.nanos = 250_000_000
        order.qty["tea"] = 2
        order.priority.value = 10
        order.lines.add(sku="s1")
        k = key(region="eu", n=2**64 - 1, f=1.5, d=-2.25, fx=2**63, sf=-3, ok=True, raw=b"\x00\xff", neg=-9)
        k.nums.extend([1, -2, 300])
        k1 = ProtobufSerializer(key, client, CONF)(k, keys)
        framed1 = ProtobufSerializer(v1, client, CONF)(order, values)
        binary = "application/vnd.kafka.binary.v2+json"
        _post(stack.gateway_url, binary, {"records": [{"key": _b64(k1), "value": _b64(framed1)}]})
        # the REST Proxy's protobuf format with version 1 (imports resolved); a proto3 record with defaults
        sid1 = httpx.get(f"{stack.registry_url}/subjects/orders-value/versions/1").json()["id"]
        rest = {"value_schema_id": sid1, "records": [{"value": {"id": 2, "iban": "NO9"}}]}
        _post(stack.gateway_url, "application/vnd.kafka.protobuf.v2+json", rest)
        later = v2(id=3, note="fragile", lines=[{"sku": "s3", "qty": 4}])
        framed3 = ProtobufSerializer(v2, client, CONF)(later, values)  # registers version 2
        records = [{"value": _b64(framed3)}, {"value": _b64(b"not framed")}, {"value": None}]
        _post(stack.gateway_url, binary, {"records": records})
        sid2 = httpx.get(f"{stack.registry_url}/subjects/orders-value/versions/2").json()["id"]
        # and one over the Kafka listener, with librdkafka
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "acks": "all"})
        over_kafka = ProtobufSerializer(v2, client, CONF)(v2(id=6, note="via kafka", status=1), values)
        producer.produce("orders", key=k1, value=over_kafka)
        assert producer.flush(30) == 0
        del producer  # librdkafka's threads end with the object, before the listener stops

        stack.broker.create_topic("pings")
        ping = _ping_class()
        pings = SerializationContext("pings", MessageField.VALUE)
        framed = ProtobufSerializer(ping, client, CONF)(ping(meta={"host": "h1"}, n=7), pings)
        assert framed is not None and framed[5:7] == b"\x02\x02"  # message indexes [1]
        _post(stack.gateway_url, binary, {"records": [{"value": _b64(framed)}]}, "pings")

    result = register_tables(spark, warehouse)
    assert result.typed_views == {"orders": "topiclake.orders_typed", "pings": "topiclake.pings_typed"}
    ping_row = spark.sql("SELECT meta.host, n FROM topiclake.pings_typed").collect()
    assert [tuple(r) for r in ping_row] == [("h1", 7)]  # the file's main message, not its first
    columns = spark.table("topiclake.orders_typed").columns
    assert columns[:8] == [
        *("partition", "offset", "timestamp", "timestampType", "headers", "key"),
        *("key_schema_id", "value_schema_id"),
    ]
    assert columns[8:] == [  # version 2's fields first, in its order
        *("id", "at", "ship_to", "qty", "tags", "status", "card", "iban", "priority", "lines", "note"),
    ]
    rows = spark.sql(
        "SELECT offset, value_schema_id, id, at, ship_to.city, ship_to.zip, qty, tags, status, card, iban, "
        "priority, lines, note FROM topiclake.orders_typed ORDER BY offset"
    ).collect()
    at = dt.datetime(2023, 11, 14, 22, 13, 20, 250_000, tzinfo=dt.UTC)
    local = at.astimezone().replace(tzinfo=None)  # Spark returns the session's local time
    assert [tuple(r)[2:] for r in rows] == [
        (1, local, "Oslo", -1, {"tea": 2}, ["a", "b"], "PAID", "c1", None, 10, [("s1", None)], None),
        (2, None, None, None, {}, [], "NEW", None, "NO9", None, [], None),  # proto3 defaults, unset messages
        (3, None, None, None, {}, [], "NEW", None, None, None, [("s3", 4)], "fragile"),
        (None,) * 12,  # not in the wire format
        (None,) * 12,  # a tombstone
        (6, None, None, None, {}, [], "PAID", None, None, None, [], "via kafka"),
    ]
    assert [r.value_schema_id for r in rows] == [sid1, sid1, sid2, None, None, sid2]
    keyed = spark.sql("SELECT key, key_schema_id FROM topiclake.orders_typed WHERE key IS NOT NULL").collect()
    assert [r.offset for r in rows if r.offset in (0, 5)] == [0, 5] and len(keyed) == 2
    kr = keyed[0]
    assert kr.key == keyed[1].key and kr.key_schema_id is not None
    assert tuple(kr.key) == (
        "eu",
        Decimal(2**64 - 1),
        1.5,
        -2.25,
        Decimal(2**63),
        -3,
        True,
        bytearray(b"\x00\xff"),
        -9,
        [1, -2, 300],
    )
