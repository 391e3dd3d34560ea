"""The SQL Protobuf decoder on its own: well-known types, a message that contains itself, a map key that
repeats on the wire, unknown fields, and bytes that are not a valid message (no failed query)."""

from __future__ import annotations

import datetime as dt

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, struct_pb2
from pyspark.sql import SparkSession

from topiclake.spark._protobuf_sql import message_sql

_F = descriptor_pb2.FieldDescriptorProto


def _node_class() -> type:
    f = descriptor_pb2.FileDescriptorProto(name="node.proto", package="t", syntax="proto3")
    f.dependency.extend(["google/protobuf/struct.proto", "google/protobuf/duration.proto"])
    m = f.message_type.add(name="Node")
    m.field.add(name="v", number=1, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    m.field.add(name="child", number=2, type=_F.TYPE_MESSAGE, type_name=".t.Node", label=_F.LABEL_OPTIONAL)
    m.field.add(name="attrs", number=3, type=_F.TYPE_MESSAGE, type_name=".google.protobuf.Struct")
    m.field.add(name="took", number=4, type=_F.TYPE_MESSAGE, type_name=".google.protobuf.Duration")
    entry = m.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
    m.field.add(
        name="tags", number=5, type=_F.TYPE_MESSAGE, type_name=".t.Node.TagsEntry", label=_F.LABEL_REPEATED
    )
    pool = descriptor_pool.DescriptorPool()
    for module in (struct_pb2, duration_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Node"))


def test_decoder_copes_with_recursion_repeats_unknown_fields_and_garbage(spark: SparkSession) -> None:
    node = _node_class()
    decoded = message_sql(node.DESCRIPTOR)
    assert decoded is not None
    types = dict(decoded.fields)
    assert types["child"] == "BINARY"  # a recursive field: the raw message
    assert types["took"] == "STRUCT<`seconds`: BIGINT, `nanos`: INT>"
    msg = node(
        v=1,
        child=node(v=2, child=node(v=3)),
    )
    msg.took.seconds, msg.took.nanos = 5, 7
    msg.attrs.update({"a": 1.5})
    msg.tags["x"] = 1
    data = msg.SerializeToString()
    data += node(tags={"x": 9}).SerializeToString()  # the same map key again: the last one wins
    data += b"\xa0\x06\x05"  # field 100 (unknown to this schema), varint 5
    cases = [data, b"", b"\xff\xff\xff", b"\x12\xff\xff\xff\xff\x0f\x01", bytes(range(256))]
    values = ", ".join(f"({i}, X'{c.hex()}')" for i, c in enumerate(cases))
    decoded_rows = spark.sql(
        f"SELECT {decoded.expr('b')} AS r FROM VALUES {values} AS t(i, b) ORDER BY i"
    ).collect()
    rows = [r.r for r in decoded_rows]
    assert rows is not None
    first = rows[0]
    assert (first.v, node.FromString(bytes(first.child)).child.v) == (1, 3)
    assert (first.took.seconds, first.took.nanos, first.tags) == (5, 7, {"x": 9})
    assert first.attrs.fields["a"].number_value == 1.5
    assert rows[1].v == 0 and rows[1].child is None and rows[1].tags == {}  # an empty message: defaults
    assert rows[1].attrs is None and rows[1].took is None
    assert all(r is not None for r in rows[2:])  # garbage decodes to something, and the query does not fail
    assert dt.timedelta(seconds=first.took.seconds) == dt.timedelta(seconds=5)
