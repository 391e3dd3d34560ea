"""Protobuf records from JSON and back: descriptors built from a parsed ``.proto`` (``proto-schema-parser``'s
AST) with the ``protobuf`` runtime, and Confluent's message indexes.

Confluent frames a Protobuf record as magic byte 0, the 4-byte schema id, the *message indexes* (which
message of the file: a zig-zag varint count, then one zig-zag varint per nesting level; the first top-level
message is the single byte 0), then the serialized message. topiclake writes records of the file's first
top-level message, and reads any message the indexes name. Imports and well-known types are not resolved.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message
from proto_schema_parser import ast

from topiclake.errors import InvalidSchema, RecordSchemaMismatch

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE,
    "float": _F.TYPE_FLOAT,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32,
    "fixed64": _F.TYPE_FIXED64,
    "fixed32": _F.TYPE_FIXED32,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "uint32": _F.TYPE_UINT32,
    "sfixed32": _F.TYPE_SFIXED32,
    "sfixed64": _F.TYPE_SFIXED64,
    "sint32": _F.TYPE_SINT32,
    "sint64": _F.TYPE_SINT64,
}


def _collect(elements: list[Any], scope: str, kinds: dict[str, str]) -> None:
    for el in elements:
        if isinstance(el, ast.Message):
            kinds[f"{scope}.{el.name}"] = "message"
            _collect(el.elements, f"{scope}.{el.name}", kinds)
        elif isinstance(el, ast.Enum):
            kinds[f"{scope}.{el.name}"] = "enum"


def _resolve(ref: str, scope: str, kinds: dict[str, str]) -> str:
    if ref.startswith("."):
        if ref in kinds:
            return ref
    else:
        parts = scope.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join([*parts[:i], ref]) if parts[:i] != [""] else f".{ref}"
            if candidate in kinds:
                return candidate
        if f".{ref}" in kinds:
            return f".{ref}"
    raise InvalidSchema(
        f"Invalid schema: type {ref!r} is not defined in this file (imports are not resolved)"
    )


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _field(
    out: descriptor_pb2.FieldDescriptorProto,
    name: str,
    number: int,
    type_: str,
    scope: str,
    kinds: dict[str, str],
) -> None:
    out.name, out.number = name, number
    out.json_name = json_format._ToJsonName(name) if hasattr(json_format, "_ToJsonName") else name
    if type_ in _SCALARS:
        out.type = _SCALARS[type_]
        return
    full = _resolve(type_, scope, kinds)
    out.type = _F.TYPE_MESSAGE if kinds[full] == "message" else _F.TYPE_ENUM
    out.type_name = full


def _message(out: descriptor_pb2.DescriptorProto, msg: Any, scope: str, kinds: dict[str, str]) -> None:
    out.name = msg.name
    here = f"{scope}.{msg.name}"
    for el in msg.elements:
        if isinstance(el, ast.Field):
            f = out.field.add()
            _field(f, el.name, el.number, el.type, here, kinds)
            card = el.cardinality.value if el.cardinality is not None else ""
            f.label = (
                _F.LABEL_REPEATED
                if card == "REPEATED"
                else _F.LABEL_REQUIRED
                if card == "REQUIRED"
                else _F.LABEL_OPTIONAL
            )
        elif isinstance(el, ast.MapField):
            entry = out.nested_type.add()
            entry.name = f"{_camel(el.name)}Entry"
            entry.options.map_entry = True
            kinds[f"{here}.{entry.name}"] = "message"
            for i, (n, t) in enumerate((("key", el.key_type), ("value", el.value_type)), start=1):
                ef = entry.field.add()
                _field(ef, n, i, t, here, kinds)
                ef.label = _F.LABEL_OPTIONAL
            f = out.field.add()
            _field(f, el.name, el.number, f"{here}.{entry.name}", here, kinds)
            f.label = _F.LABEL_REPEATED
        elif isinstance(el, ast.OneOf):
            index = len(out.oneof_decl)
            out.oneof_decl.add().name = el.name
            for member in el.elements:
                if isinstance(member, ast.Field):
                    f = out.field.add()
                    _field(f, member.name, member.number, member.type, here, kinds)
                    f.label = _F.LABEL_OPTIONAL
                    f.oneof_index = index
        elif isinstance(el, ast.Message):
            _message(out.nested_type.add(), el, here, kinds)
        elif isinstance(el, ast.Enum):
            _enum(out.enum_type.add(), el)


def _enum(out: descriptor_pb2.EnumDescriptorProto, enum: Any) -> None:
    out.name = enum.name
    for el in enum.elements:
        if isinstance(el, ast.EnumValue):
            v = out.value.add()
            v.name, v.number = el.name, el.number


def file_descriptor(tree: Any, file_name: str) -> descriptor_pb2.FileDescriptorProto:
    """A ``FileDescriptorProto`` from a parsed ``.proto`` file (``proto-schema-parser``'s AST).

    Raises:
        InvalidSchema: the file uses types it does not define.
    """
    fdp = descriptor_pb2.FileDescriptorProto(name=file_name, syntax=tree.syntax or "proto2")
    package = next((el.name for el in tree.file_elements if isinstance(el, ast.Package)), "")
    if package:
        fdp.package = package
    scope = f".{package}" if package else ""
    kinds: dict[str, str] = {}
    _collect(tree.file_elements, scope, kinds)
    for el in tree.file_elements:
        if isinstance(el, ast.Message):
            _message(fdp.message_type.add(), el, scope, kinds)
        elif isinstance(el, ast.Enum):
            _enum(fdp.enum_type.add(), el)
    return fdp


class ProtobufCodec:
    """The message classes of one file.

    Raises:
        InvalidSchema: the protobuf runtime refuses the descriptor (for example an unresolved import).
    """

    def __init__(self, fdp: descriptor_pb2.FileDescriptorProto) -> None:
        prefix = f"{fdp.package}." if fdp.package else ""
        self._top: list[str] = [f"{prefix}{m.name}" for m in fdp.message_type]
        pool = descriptor_pool.DescriptorPool()
        try:
            pool.Add(fdp)
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
        if len(indexes) != 1 or not 0 <= indexes[0] < len(self._top):
            raise RecordSchemaMismatch(f"message indexes {indexes} name no top-level message of the schema")
        msg: Message = self._classes[self._top[indexes[0]]]()
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
