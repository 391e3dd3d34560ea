"""Parsed schemas of the three types the registry knows: AVRO, JSON (Schema) and PROTOBUF.

:func:`parse` turns a schema's text (plus the texts of the schemas it references, already resolved by the
registry) into a :class:`ParsedSchema`, raising :class:`~topiclake.errors.InvalidSchema` when it does not
parse. A parsed schema knows its canonical form (what makes two registrations "the same schema") and which
other schema versions it can read (:meth:`ParsedSchema.read_errors`), the building block of compatibility.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from topiclake.errors import InvalidSchema

__all__ = ["SCHEMA_TYPES", "ParsedSchema", "Reference", "parse"]

#: The schema types, as Confluent names them (AVRO is the default when ``schemaType`` is omitted).
SCHEMA_TYPES: Final = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class Reference:
    """A reference from one schema to another: the name it is imported by, and its subject and version."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        """Confluent's JSON form."""
        return {"name": self.name, "subject": self.subject, "version": self.version}


class ParsedSchema:
    """A schema that parsed; subclasses implement one schema type.

    Attributes:
        schema_type: ``AVRO``, ``JSON`` or ``PROTOBUF``.
        text: The schema as registered.
        canonical: A normal form: two schemas with the same canonical form are the same schema.
    """

    schema_type: str = ""

    def __init__(self, text: str, canonical: str) -> None:
        self.text = text
        self.canonical = canonical

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        """Why data written with ``writer`` cannot be read with this schema (empty: it can)."""
        raise NotImplementedError


def parse(schema_type: str, text: str, references: Sequence[tuple[str, str]] = ()) -> ParsedSchema:
    """Parse a schema.

    Args:
        schema_type: ``AVRO``, ``JSON`` or ``PROTOBUF``.
        text: The schema's text.
        references: ``(name, text)`` of every schema it references, transitively, dependencies first.

    Raises:
        InvalidSchema: an unknown type, or a schema that does not parse.
    """
    if schema_type == "AVRO":
        from topiclake.schema_registry._avro import AvroSchema

        return AvroSchema.parse(text, references)
    if schema_type == "JSON":
        from topiclake.schema_registry._jsonschema import JsonSchema

        return JsonSchema.parse(text, references)
    if schema_type == "PROTOBUF":
        from topiclake.schema_registry._protobuf import ProtobufSchema

        return ProtobufSchema.parse(text, references)
    raise InvalidSchema(f"Invalid schema type {schema_type!r}: use one of {', '.join(SCHEMA_TYPES)}")
