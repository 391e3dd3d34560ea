"""Protobuf schemas: files built with their imports (``_protobuf_files``); compatibility by field numbers.

Compatibility follows protobuf's wire rules: a field number that both schemas use must keep a wire-compatible
type (``int32``/``int64``/``uint32``/``uint64``/``bool``/enums; ``sint32``/``sint64``; ``fixed32``/
``sfixed32``; ``fixed64``/``sfixed64``; ``string``/``bytes``; same message type otherwise), a message the
writer has must still exist in the reader, and a proto2 ``required`` field may not appear in the reader
without being in the writer. Field names, added and removed optional fields do not matter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from topiclake.errors import RecordSchemaMismatch
from topiclake.schema_registry._parsed import ParsedSchema
from topiclake.schema_registry._protobuf_files import FileSet, from_base64
from topiclake.schema_registry.errors import InvalidSchema

_WIRE_GROUPS = (
    {"int32", "int64", "uint32", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
)

_Fields = dict[str, dict[int, tuple[str, str]]]


def _fields_of(fdp: Any) -> tuple[_Fields, set[str]]:
    """Each message's fields by number (type: a scalar's name or a full type name) and the file's enums."""
    enums: set[str] = set()
    fields: _Fields = {}

    def walk(messages: Any, prefix: str) -> None:
        for m in messages:
            name = f"{prefix}{m.name}"
            enums.update(f"{name}.{e.name}" for e in m.enum_type)
            fields[name] = {
                f.number: (
                    f.type_name.lstrip(".") if f.type_name else _TYPE_NAMES.get(f.type, str(f.type)),
                    _LABELS.get(f.label, ""),
                )
                for f in m.field
            }
            walk(m.nested_type, f"{name}.")

    prefix = f"{fdp.package}." if fdp.package else ""
    enums.update(f"{prefix}{e.name}" for e in fdp.enum_type)
    walk(fdp.message_type, prefix)
    return fields, enums


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
    a = "int32" if a in enums else a
    b = "int32" if b in enums else b
    return a == b or any(a in g and b in g for g in _WIRE_GROUPS)


class ProtobufSchema(ParsedSchema):
    """A ``.proto`` file's messages and their fields by number, built with its imports into one pool."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str, canonical: str, files: FileSet, fdp: Any) -> None:
        super().__init__(text, canonical)
        self.files = files
        self._fdp = fdp
        self.fields, self.enums = _fields_of(fdp)
        for dep in files.files.values():  # enums of imported files count as enums in field types
            if dep is not fdp:
                self.enums |= _fields_of(dep)[1]
        self._codec: Any = None

    def descriptor(self) -> Any:
        """The file as a ``FileDescriptorProto`` (Confluent's ``format=serialized``)."""
        return self._fdp

    def descriptor_set(self) -> bytes:
        """The file and every file it imports, as a serialized ``FileDescriptorSet``."""
        return self.files.descriptor_set()

    def message_name(self) -> str:
        """The full name of the file's first top-level message (what topiclake writes), or ``""``."""
        if not len(self._fdp.message_type):
            return ""
        prefix = f"{self._fdp.package}." if self._fdp.package else ""
        return f"{prefix}{self._fdp.message_type[0].name}"

    def root_message(self) -> tuple[int, str]:
        """The index and full name of the file's main message: the first top-level message that no other
        message of the file uses as a field type (the first one if each is used), or ``(-1, "")``."""
        prefix = f"{self._fdp.package}." if self._fdp.package else ""
        names = [f"{prefix}{m.name}" for m in self._fdp.message_type]
        used = {t for fields in self.fields.values() for t, _card in fields.values()}
        for i, name in enumerate(names):
            if name not in used:
                return i, name
        return (0, names[0]) if names else (-1, "")

    def codec(self) -> Any:
        """The message classes of this file (built on first use; see ``_protobuf_codec``)."""
        if self._codec is None:
            from topiclake.schema_registry._protobuf_codec import ProtobufCodec

            self._codec = ProtobufCodec(self.files.pool, self._fdp)
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
        serializers register). Its imports must be among the references (by their import name, with the
        files they import before them) or be protobuf's well-known types (``google/protobuf/*.proto``)."""
        files = FileSet()
        for name, ref_text in references:
            try:
                files.load(ref_text, name)
            except InvalidSchema as exc:
                raise InvalidSchema(f"Invalid schema: reference {name!r}: {exc.message}") from exc
        fdp = files.load(text, None)
        if not len(fdp.message_type):
            raise InvalidSchema("Invalid schema: a protobuf schema needs at least one message")
        if from_base64(text) is not None:
            canonical = text.strip()
        else:
            canonical = re.sub(r"\s+", " ", re.sub(r"//[^\n]*", "", text)).strip()
        return cls(text, canonical, files, fdp)

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
