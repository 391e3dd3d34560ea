"""Protobuf records from JSON and back, with the message classes of a schema's descriptor pool
(``_protobuf_files``) and Confluent's message indexes.

Confluent frames a Protobuf record as magic byte 0, the 4-byte schema id, the *message indexes* (which
message of the file: a zig-zag varint count, then one zig-zag varint per nesting level; the first top-level
message is the single byte 0), then the serialized message. topiclake writes records of the file's first
top-level message, and reads any message the indexes name.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from topiclake.errors import RecordSchemaMismatch
from topiclake.schema_registry.errors import InvalidSchema


class ProtobufCodec:
    """The message classes of one file (its imports in the same pool).

    Raises:
        InvalidSchema: the protobuf runtime refuses the descriptor (for example an unresolved import).
    """

    def __init__(self, pool: descriptor_pool.DescriptorPool, fdp: descriptor_pb2.FileDescriptorProto) -> None:
        prefix = f"{fdp.package}." if fdp.package else ""
        self._top: list[str] = [f"{prefix}{m.name}" for m in fdp.message_type]
        self._pool = pool
        try:
            self._classes = {
                name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name)) for name in self._top
            }
        except (TypeError, KeyError, ValueError) as exc:
            raise InvalidSchema(f"Invalid schema: {exc}") from exc

    def encode(self, value: Any) -> bytes:
        """Message indexes + the serialized first top-level message, from its JSON form."""
        if not self._top:
            raise RecordSchemaMismatch("the schema has no message")
        cls = self._classes[self._top[0]]
        try:
            msg = json_format.ParseDict(value, cls())
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise RecordSchemaMismatch(f"record does not match the Protobuf schema: {exc}") from exc
        data: bytes = msg.SerializeToString()
        return b"\x00" + data

    def decode(self, payload: bytes) -> Any:
        """The JSON form of a payload (message indexes + message)."""
        indexes, pos = _read_indexes(payload)
        if not 0 <= indexes[0] < len(self._top):
            raise RecordSchemaMismatch(f"message indexes {indexes} name no top-level message of the schema")
        cls = self._classes[self._top[indexes[0]]]
        if len(indexes) > 1:  # a nested message: one index per level below the top-level one
            desc = self._pool.FindMessageTypeByName(self._top[indexes[0]])
            for i in indexes[1:]:
                if not 0 <= i < len(desc.nested_types):
                    raise RecordSchemaMismatch(f"message indexes {indexes} name no message of the schema")
                desc = desc.nested_types[i]
            cls = message_factory.GetMessageClass(desc)
        msg: Message = cls()
        try:
            msg.ParseFromString(payload[pos:])
        except DecodeError as exc:
            raise RecordSchemaMismatch(f"record does not decode with its Protobuf schema: {exc}") from exc
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise RecordSchemaMismatch("truncated Protobuf message indexes")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos  # zig-zag
        shift += 7


def _read_indexes(data: bytes) -> tuple[list[int], int]:
    count, pos = _varint(data, 0)
    if count == 0:
        return [0], pos
    out = []
    for _ in range(count):
        i, pos = _varint(data, pos)
        out.append(i)
    return out, pos
