"""The files of one Protobuf schema: the schema's own file, the files it references, and the well-known types.

A Protobuf schema is one ``.proto`` file. It may import other files: the schemas it references (Confluent's
schema references, whose ``name`` is the import path) and protobuf's well-known types
(``google/protobuf/timestamp.proto`` and the others the ``protobuf`` package ships, which need no
reference, as in Confluent's registry). :class:`FileSet` builds every file into one descriptor pool,
dependencies first, and refuses an import it cannot satisfy. A file is given as ``.proto`` text or, as
Confluent's serializers register it, as a base64 ``FileDescriptorProto``.
"""

from __future__ import annotations

import base64
import binascii
import importlib
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from proto_schema_parser.parser import Parser

from topiclake.schema_registry._protobuf_ast import file_descriptor, imports_of, symbols_of
from topiclake.schema_registry.errors import InvalidSchema

__all__ = ["FileSet", "well_known"]

_FDP = descriptor_pb2.FileDescriptorProto
#: The well-known types' files the ``protobuf`` package ships (``google/protobuf/<name>.proto``).
_WELL_KNOWN = frozenset(
    {
        "any",
        "api",
        "descriptor",
        "duration",
        "empty",
        "field_mask",
        "source_context",
        "struct",
        "timestamp",
        "type",
        "wrappers",
    }
)


class _Raise(ErrorListener):  # type: ignore[misc]
    """ANTLR prints syntax errors and recovers by default; a registry must refuse the schema instead."""

    def syntaxError(self, recognizer: Any, symbol: Any, line: int, column: int, msg: str, e: Any) -> None:
        raise InvalidSchema(f"Invalid schema: line {line}:{column}: {msg}")


def _strict(component: Any) -> None:
    component.removeErrorListeners()
    component.addErrorListener(_Raise())


def well_known(path: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor of a well-known type's file (``google/protobuf/timestamp.proto``), or None."""
    prefix, suffix = "google/protobuf/", ".proto"
    stem = path[len(prefix) : -len(suffix)] if path.startswith(prefix) and path.endswith(suffix) else ""
    if stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    return _FDP.FromString(module.DESCRIPTOR.serialized_pb)


def from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The ``FileDescriptorProto`` a base64 text holds, or None when it is not one."""
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " ;{}\n"):
        return None
    try:
        fdp = _FDP.FromString(base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fdp if fdp.name and (len(fdp.message_type) or len(fdp.enum_type)) else None


def parse_text(text: str) -> Any:
    """The AST of ``.proto`` text.

    Raises:
        InvalidSchema: it does not parse.
    """
    try:
        return Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except InvalidSchema:
        raise
    except Exception as exc:  # the parser raises its own and ANTLR's errors
        raise InvalidSchema(f"Invalid schema: {exc}") from exc


class FileSet:
    """Files built into one descriptor pool, dependencies first.

    Attributes:
        files: File name -> descriptor, in the order they were added (each after its dependencies).
        pool: The descriptor pool holding them.
    """

    def __init__(self) -> None:
        self.files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        self.pool = descriptor_pool.DescriptorPool()

    def load(self, text: str, name: str | None) -> descriptor_pb2.FileDescriptorProto:
        """Build one file (``.proto`` text or base64 descriptor) whose imports are loaded already or are
        well-known types, and add it.

        Args:
            text: The file.
            name: The name others import it by (a reference's name); None keeps a descriptor's own name
                (``schema.proto`` for text).

        Raises:
            InvalidSchema: it does not parse, or imports or uses what is not there.
        """
        fdp = from_base64(text)
        if fdp is None:
            tree = parse_text(text)
            imports = [path for path, _public in imports_of(tree)]
            for path in imports:
                self._ensure(path, name or "the schema")
            fdp = file_descriptor(tree, name or "schema.proto", symbols_of(self._visible(imports)))
        elif name is not None:
            fdp.name = name
        return self.add(fdp)

    def add(self, fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
        """Add a descriptor (its dependencies first, well-known types as needed); a name added already
        is kept as it was."""
        if fdp.name in self.files:
            return self.files[fdp.name]
        for dep in fdp.dependency:
            self._ensure(dep, fdp.name)
        try:
            self.pool.Add(fdp)
        except (TypeError, KeyError, ValueError) as exc:
            raise InvalidSchema(f"Invalid schema: {fdp.name}: {exc}") from exc
        self.files[fdp.name] = fdp
        return fdp

    def _ensure(self, path: str, importer: str) -> None:
        if path in self.files:
            return
        wk = well_known(path)
        if wk is None:
            raise InvalidSchema(
                f"Invalid schema: {importer} imports {path!r}, which is neither among the schema's "
                "references (name = import path) nor a google/protobuf well-known type"
            )
        self.add(wk)

    def _visible(self, imports: list[str]) -> list[descriptor_pb2.FileDescriptorProto]:
        """The imported files and, transitively, what they import publicly."""
        out: list[descriptor_pb2.FileDescriptorProto] = []
        todo = list(imports)
        while todo:
            fdp = self.files[todo.pop()]
            if fdp not in out:
                out.append(fdp)
                todo += [fdp.dependency[i] for i in fdp.public_dependency]
        return out

    def descriptor_set(self) -> bytes:
        """Every file as a serialized ``FileDescriptorSet`` (``protoc --include_imports``' form)."""
        data: bytes = descriptor_pb2.FileDescriptorSet(file=list(self.files.values())).SerializeToString()
        return data
