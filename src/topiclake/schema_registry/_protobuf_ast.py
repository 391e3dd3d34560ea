"""A ``FileDescriptorProto`` from a parsed ``.proto`` file (``proto-schema-parser``'s AST).

Type names are resolved as ``protoc`` does it, innermost scope first: against the file's own messages and
enums, and against the symbols of the files it imports (``symbols``: full names with a leading dot, as
:func:`symbols_of` lists them). A name that resolves nowhere is an :class:`~.errors.InvalidSchema`.
proto3 ``optional`` fields get their synthetic oneof (explicit presence), as ``protoc`` writes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2
from proto_schema_parser import ast

from topiclake.schema_registry.errors import InvalidSchema

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


def symbols_of(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> dict[str, str]:
    """Full name (leading dot) -> ``message`` or ``enum`` of every type the files declare."""
    kinds: dict[str, str] = {}

    def walk(messages: Any, enums: Any, scope: str) -> None:
        for e in enums:
            kinds[f"{scope}.{e.name}"] = "enum"
        for m in messages:
            kinds[f"{scope}.{m.name}"] = "message"
            walk(m.nested_type, m.enum_type, f"{scope}.{m.name}")

    for fdp in files:
        walk(fdp.message_type, fdp.enum_type, f".{fdp.package}" if fdp.package else "")
    return kinds


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
        f"Invalid schema: type {ref!r} is defined neither in this file nor in a file it imports "
        "(a reference, or a google/protobuf well-known type)"
    )


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _field(
    out: descriptor_pb2.FieldDescriptorProto,
    name: str,
    number: int,
    type_: str,
    scope: str,
    kinds: dict[str, str],
) -> None:
    out.name, out.number, out.json_name = name, number, _json_name(name)
    if type_ in _SCALARS:
        out.type = _SCALARS[type_]
        return
    full = _resolve(type_, scope, kinds)
    out.type = _F.TYPE_MESSAGE if kinds[full] == "message" else _F.TYPE_ENUM
    out.type_name = full


def _label(card: str) -> Any:
    return {"REPEATED": _F.LABEL_REPEATED, "REQUIRED": _F.LABEL_REQUIRED}.get(card, _F.LABEL_OPTIONAL)


def _message(
    out: descriptor_pb2.DescriptorProto, msg: Any, scope: str, kinds: dict[str, str], proto3: bool
) -> None:
    out.name = msg.name
    here = f"{scope}.{msg.name}"
    synthetic: list[
        descriptor_pb2.FieldDescriptorProto
    ] = []  # proto3 optional fields: their oneofs come after the real ones
    for el in msg.elements:
        if isinstance(el, ast.Field):
            f = out.field.add()
            _field(f, el.name, el.number, el.type, here, kinds)
            card = el.cardinality.value if el.cardinality is not None else ""
            f.label = _label(card)
            if proto3 and card == "OPTIONAL":
                f.proto3_optional = True
                synthetic.append(f)
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
            _message(out.nested_type.add(), el, here, kinds, proto3)
        elif isinstance(el, ast.Enum):
            _enum(out.enum_type.add(), el)
    for f in synthetic:
        f.oneof_index = len(out.oneof_decl)
        out.oneof_decl.add().name = f"_{f.name}"


def _enum(out: descriptor_pb2.EnumDescriptorProto, enum: Any) -> None:
    out.name = enum.name
    for el in enum.elements:
        if isinstance(el, ast.EnumValue):
            v = out.value.add()
            v.name, v.number = el.name, el.number


def imports_of(tree: Any) -> list[tuple[str, bool]]:
    """``(path, public)`` of every import of a parsed file, in order."""
    return [(el.name, bool(el.public)) for el in tree.file_elements if isinstance(el, ast.Import)]


def file_descriptor(tree: Any, file_name: str, symbols: dict[str, str]) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of a parsed file.

    Args:
        tree: The parsed file.
        file_name: Its name (the import path others use for it).
        symbols: The types of the files it imports (:func:`symbols_of`).

    Raises:
        InvalidSchema: the file uses a type that neither it nor an imported file defines.
    """
    syntax = tree.syntax or "proto2"
    fdp = descriptor_pb2.FileDescriptorProto(name=file_name, syntax=syntax)
    package = next((el.name for el in tree.file_elements if isinstance(el, ast.Package)), "")
    if package:
        fdp.package = package
    for i, (path, public) in enumerate(imports_of(tree)):
        fdp.dependency.append(path)
        if public:
            fdp.public_dependency.append(i)
    scope = f".{package}" if package else ""
    kinds = dict(symbols)
    _collect(tree.file_elements, scope, kinds)
    for el in tree.file_elements:
        if isinstance(el, ast.Message):
            _message(fdp.message_type.add(), el, scope, kinds, syntax == "proto3")
        elif isinstance(el, ast.Enum):
            _enum(fdp.enum_type.add(), el)
    return fdp
