"""The base of the parsed schemas: :class:`ParsedSchema`, :class:`Reference` and the schema types.

The format modules (``_avro``, ``_jsonschema``, ``protobuf``) subclass :class:`ParsedSchema` from here, and
:mod:`.formats` dispatches to them; so no format module imports :mod:`.formats` back (it re-exports these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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
