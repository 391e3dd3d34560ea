"""Parsed schemas of the three types the registry knows: AVRO, JSON (Schema) and PROTOBUF.

:func:`parse` turns a schema's text (plus the texts of the schemas it references, already resolved by the
registry) into a :class:`ParsedSchema`, raising :class:`~.errors.InvalidSchema` when it does not
parse. A parsed schema knows its canonical form (what makes two registrations "the same schema") and which
other schema versions it can read (:meth:`ParsedSchema.read_errors`), the building block of compatibility.
"""

from __future__ import annotations

from collections.abc import Sequence

from topiclake.schema_registry._parsed import SCHEMA_TYPES, ParsedSchema, Reference
from topiclake.schema_registry.errors import InvalidSchema

__all__ = ["SCHEMA_TYPES", "ParsedSchema", "Reference", "parse"]


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
        from topiclake.schema_registry.protobuf import ProtobufSchema

        return ProtobufSchema.parse(text, references)
    raise InvalidSchema(f"Invalid schema type {schema_type!r}: use one of {', '.join(SCHEMA_TYPES)}")
