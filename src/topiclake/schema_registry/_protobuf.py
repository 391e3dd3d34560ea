"""Protobuf schemas (``.proto`` text): parsed by ``proto-schema-parser``; compatibility by field numbers.

Compatibility follows protobuf's wire rules: a field number that both schemas use must keep a wire-compatible
type (``int32``/``int64``/``uint32``/``uint64``/``bool``/enums; ``sint32``/``sint64``; ``fixed32``/
``sfixed32``; ``fixed64``/``sfixed64``; ``string``/``bytes``; same message type otherwise), a message the
writer has must still exist in the reader, and a proto2 ``required`` field may not appear in the reader
without being in the writer. Field names, added and removed optional fields do not matter.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from topiclake.errors import InvalidSchema, RecordSchemaMismatch
from topiclake.schema_registry._parsed import ParsedSchema

_WIRE_GROUPS = (
    {"int32", "int64", "uint32", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
)

_Fields = dict[str, dict[int, tuple[str, str]]]


class _Raise(ErrorListener):  # type: ignore[misc]
    """ANTLR prints syntax errors and recovers by default; a registry must refuse the schema instead."""

    def syntaxError(self, recognizer: Any, symbol: Any, line: int, column: int, msg: str, e: Any) -> None:
        raise InvalidSchema(f"Invalid schema: line {line}:{column}: {msg}")


def _strict(component: Any) -> None:
    component.removeErrorListeners()
    component.addErrorListener(_Raise())


def _messages(elements: Sequence[Any], prefix: str, enums: set[str]) -> Iterator[tuple[str, Any]]:
    for el in elements:
        if isinstance(el, ast.Message):
            name = f"{prefix}{el.name}"
            yield name, el
            yield from _messages(el.elements, f"{name}.", enums)
        elif isinstance(el, ast.Enum):
            enums.add(el.name)


def _fields(message: Any) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for el in message.elements:
        if isinstance(el, ast.Field):
            card = el.cardinality.value if el.cardinality is not None else ""
            out[el.number] = (el.type, card)
        elif isinstance(el, ast.MapField):
            out[el.number] = (f"map<{el.key_type},{el.value_type}>", "")
        elif isinstance(el, ast.OneOf):
            for f in el.elements:
                if isinstance(f, ast.Field):
                    out[f.number] = (f.type, "")
    return out


def _from_base64(text: str) -> Any:
    """The ``FileDescriptorProto`` a base64 text holds, or None when it is not one."""
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " ;{}\n"):
        return None
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fdp if fdp.name and len(fdp.message_type) else None


_TYPE_NAMES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    12: "bytes",
    13: "uint32",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}
_LABELS = {2: "REQUIRED", 3: "REPEATED"}


def _wire_compatible(a: str, b: str, enums: set[str]) -> bool:
    if a == b:
        return True
    a = "int32" if a.split(".")[-1] in enums else a
    b = "int32" if b.split(".")[-1] in enums else b
    return a == b or any(a in g and b in g for g in _WIRE_GROUPS)


class ProtobufSchema(ParsedSchema):
    """A ``.proto`` file's messages and their fields by number."""

    schema_type = "PROTOBUF"

    def __init__(
        self, text: str, canonical: str, fields: _Fields, enums: set[str], tree: Any = None, fdp: Any = None
    ) -> None:
        super().__init__(text, canonical)
        self.fields = fields
        self.enums = enums
        self._tree = tree
        self._fdp = fdp
        self._codec: Any = None

    def descriptor(self) -> Any:
        """The file as a ``FileDescriptorProto`` (Confluent's ``format=serialized``)."""
        if self._fdp is None:
            from topiclake.schema_registry._protobuf_codec import file_descriptor

            self._fdp = file_descriptor(self._tree, "schema.proto")
        return self._fdp

    def codec(self) -> Any:
        """The message classes of this file (built on first use; see ``_protobuf_codec``)."""
        if self._codec is None:
            from topiclake.schema_registry._protobuf_codec import ProtobufCodec

            self._codec = ProtobufCodec(self.descriptor())
        return self._codec

    def encode(self, value: Any) -> bytes:
        """Message indexes and the serialized first message of the file, from its JSON form."""
        try:
            codec = self.codec()
        except InvalidSchema as exc:
            raise RecordSchemaMismatch(f"cannot serialize with this Protobuf schema: {exc.message}") from exc
        data: bytes = codec.encode(value)
        return data

    def decode(self, payload: bytes) -> Any:
        """The JSON form of a payload framed with message indexes."""
        return self.codec().decode(payload)

    @classmethod
    def parse(cls, text: str, references: Sequence[tuple[str, str]]) -> ProtobufSchema:
        """Parse ``text``: ``.proto`` source, or a base64 ``FileDescriptorProto`` (what Confluent's
        serializers register); imported files must be among the references (by their import name)."""
        fdp = _from_base64(text)
        if fdp is not None:
            return cls._from_descriptor(text, fdp)
        try:
            tree = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
        except InvalidSchema:
            raise
        except Exception as exc:  # the parser raises its own and ANTLR's errors
            raise InvalidSchema(f"Invalid schema: {exc}") from exc
        known = {name for name, _ in references}
        for el in tree.file_elements:
            if isinstance(el, ast.Import) and el.name not in known and not el.name.startswith("google/"):
                raise InvalidSchema(f"Invalid schema: import {el.name!r} is not among the references")
        enums: set[str] = set()
        package = next((el.name for el in tree.file_elements if isinstance(el, ast.Package)), "")
        fields = {
            name: _fields(msg)
            for name, msg in _messages(tree.file_elements, f"{package}." if package else "", enums)
        }
        if not fields:
            raise InvalidSchema("Invalid schema: a protobuf schema needs at least one message")
        canonical = re.sub(r"\s+", " ", re.sub(r"//[^\n]*", "", text)).strip()
        return cls(text, canonical, fields, enums, tree)

    @classmethod
    def _from_descriptor(cls, text: str, fdp: Any) -> ProtobufSchema:
        enums: set[str] = {e.name for e in fdp.enum_type}
        fields: _Fields = {}

        def walk(messages: Any, prefix: str) -> None:
            for m in messages:
                name = f"{prefix}{m.name}"
                enums.update(e.name for e in m.enum_type)
                fields[name] = {
                    f.number: (
                        f.type_name.lstrip(".") if f.type_name else _TYPE_NAMES.get(f.type, str(f.type)),
                        _LABELS.get(f.label, ""),
                    )
                    for f in m.field
                }
                walk(m.nested_type, f"{name}.")

        walk(fdp.message_type, f"{fdp.package}." if fdp.package else "")
        if not fields:
            raise InvalidSchema("Invalid schema: a protobuf schema needs at least one message")
        return cls(text, text.strip(), fields, enums, fdp=fdp)

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        """See the module docstring for the rules."""
        if not isinstance(writer, ProtobufSchema):
            return [f"cannot read {writer.schema_type} data with a PROTOBUF schema"]
        errors: list[str] = []
        enums = self.enums | writer.enums
        for name, w_fields in writer.fields.items():
            r_fields = self.fields.get(name)
            if r_fields is None:
                errors.append(f"message {name} was removed")
                continue
            for number, (r_type, r_card) in r_fields.items():
                if number not in w_fields:
                    if r_card == "REQUIRED":
                        errors.append(f"{name}: required field {number} is new")
                    continue
                w_type = w_fields[number][0]
                if not _wire_compatible(r_type, w_type, enums):
                    errors.append(f"{name}: field {number} changed type from {w_type} to {r_type}")
        return errors
