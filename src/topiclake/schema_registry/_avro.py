"""Avro schemas: parsed by the ``avro`` package (compatibility) and ``fastavro`` (records)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import avro.errors
import avro.name
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from topiclake.errors import RecordSchemaMismatch
from topiclake.schema_registry._parsed import ParsedSchema
from topiclake.schema_registry.errors import InvalidSchema


class AvroSchema(ParsedSchema):
    """An Avro schema (and the named types of the schemas it references)."""

    schema_type = "AVRO"

    def __init__(self, text: str, canonical: str, resolved: avro.schema.Schema, writer: Any) -> None:
        super().__init__(text, canonical)
        self.resolved = resolved
        self.fast = writer

    @classmethod
    def parse(cls, text: str, references: Sequence[tuple[str, str]]) -> AvroSchema:
        """Parse ``text`` after the referenced schemas, whose named types it may use."""
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from exc
        names = avro.name.Names()
        named: dict[str, Any] = {}
        try:
            for _name, ref_text in references:
                ref_doc = json.loads(ref_text)
                avro.schema.make_avsc_object(ref_doc, names)
                fastavro.parse_schema(ref_doc, named_schemas=named)
            resolved = avro.schema.make_avsc_object(doc, names)
            fast = fastavro.parse_schema(doc, named_schemas=named)
        except (
            avro.errors.AvroException,
            fastavro.schema.SchemaParseException,
            ValueError,
            TypeError,
        ) as exc:
            raise InvalidSchema(f"Invalid schema: {exc}") from exc
        except (KeyError, AttributeError) as exc:
            raise InvalidSchema(f"Invalid schema: missing or malformed {exc}") from exc
        canonical = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        return cls(text, canonical, resolved, fast)

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        """Avro's schema resolution rules (the ``avro`` package's reader/writer checker)."""
        if not isinstance(writer, AvroSchema):
            return [f"cannot read {writer.schema_type} data with an AVRO schema"]
        result = ReaderWriterCompatibilityChecker().get_compatibility(  # type: ignore[no-untyped-call]
            self.resolved, writer.resolved
        )
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        locations = sorted(result.locations) if result.locations else []
        return [f"{m} at {loc}" for m, loc in zip(result.messages, locations, strict=False)] or [
            "incompatible Avro schemas"
        ]

    def encode(self, value: Any) -> bytes:
        """The Avro binary encoding of a JSON-decoded record.

        Raises:
            RecordSchemaMismatch: the value does not match the schema.
        """
        try:
            fastavro.validation.validate(value, self.fast, raise_errors=True)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self.fast, value)
        except fastavro.validation.ValidationError as exc:
            why = "; ".join(str(x) for x in getattr(exc, "errors", None) or [exc])
            raise RecordSchemaMismatch(f"record does not match the Avro schema: {why}") from exc
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise RecordSchemaMismatch(f"record does not match the Avro schema: {exc}") from exc
        return out.getvalue()

    def decode(self, payload: bytes, reader: AvroSchema | None = None) -> Any:
        """Decode an Avro binary payload written with this schema (into ``reader``'s shape if given)."""
        return fastavro.schemaless_reader(
            io.BytesIO(payload), self.fast, reader.fast if reader is not None else None
        )
