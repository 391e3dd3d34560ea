"""Protobuf message classes for the tests, built at test time from ``FileDescriptorProto``s with the protobuf
runtime (no protoc, and independent of topiclake's own ``.proto`` parser).

``shop/order.proto`` imports two well-known types (``google/protobuf/timestamp.proto``,
``google/protobuf/wrappers.proto``) and ``common/address.proto``, another file that Confluent's serializer
registers as its own subject and references by that import path. Version 2 of ``shop.Order`` adds a field
(``note``) and a field to its nested message ``Line`` (``qty``).

Imported by name (``from proto_messages import ...``); the name is unique in the test tree.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2

_F = descriptor_pb2.FieldDescriptorProto

#: The same files as ``.proto`` text, for registering through the REST API.
ADDRESS_PROTO = """syntax = "proto3";
package common;
message Address {
  string city = 1;
  sint32 zip = 2;
}
"""
ORDER_PROTO_V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "common/address.proto";
message Order {
  int64 id = 1;
  google.protobuf.Timestamp at = 2;
  common.Address ship_to = 3;
  map<string, int32> qty = 4;
  repeated string tags = 5;
  Status status = 6;
  oneof pay { string card = 7; string iban = 8; }
  google.protobuf.Int32Value priority = 9;
  repeated Line lines = 11;
  message Line { string sku = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"""


def _field(m: Any, name: str, number: int, type_: int, type_name: str = "", repeated: bool = False) -> Any:
    f = m.field.add(name=name, number=number, type=type_)
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        f.type_name = type_name
    return f


def address_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="common/address.proto", package="common", syntax="proto3")
    m = f.message_type.add(name="Address")
    _field(m, "city", 1, _F.TYPE_STRING)
    _field(m, "zip", 2, _F.TYPE_SINT32)
    return f


def order_file(version: int) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    f.dependency.extend(
        ["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto", "common/address.proto"]
    )
    m = f.message_type.add(name="Order")
    _field(m, "id", 1, _F.TYPE_INT64)
    _field(m, "at", 2, _F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    _field(m, "ship_to", 3, _F.TYPE_MESSAGE, ".common.Address")
    entry = m.nested_type.add(name="QtyEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_INT32)
    _field(m, "qty", 4, _F.TYPE_MESSAGE, ".shop.Order.QtyEntry", repeated=True)
    _field(m, "tags", 5, _F.TYPE_STRING, repeated=True)
    _field(m, "status", 6, _F.TYPE_ENUM, ".shop.Order.Status")
    m.oneof_decl.add(name="pay")
    _field(m, "card", 7, _F.TYPE_STRING).oneof_index = 0
    _field(m, "iban", 8, _F.TYPE_STRING).oneof_index = 0
    _field(m, "priority", 9, _F.TYPE_MESSAGE, ".google.protobuf.Int32Value")
    _field(m, "lines", 11, _F.TYPE_MESSAGE, ".shop.Order.Line", repeated=True)
    line = m.nested_type.add(name="Line")
    _field(line, "sku", 1, _F.TYPE_STRING)
    status = m.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    if version >= 2:
        _field(m, "note", 10, _F.TYPE_STRING)
        _field(line, "qty", 2, _F.TYPE_INT32)
    return f


def order_class(version: int) -> Any:
    """``shop.Order`` of a version (each version in its own pool, as two programs would have them)."""
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(address_file())
    pool.Add(order_file(version))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
