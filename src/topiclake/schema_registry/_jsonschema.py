"""JSON Schema: parsed and checked by ``jsonschema``; compatibility by a reader/writer walk.

The compatibility walk covers what evolves in practice: types (a reader may widen ``integer`` to
``number``, never narrow), required properties (a reader may not require what the writer did not), closed
content models (``additionalProperties: false`` on the reader refuses properties only the writer has),
enums (the reader must keep every writer value) and array items, recursively through properties. It does
not reason about numeric or string bounds, ``oneOf``/``anyOf`` branches or ``$ref`` targets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from topiclake.errors import RecordSchemaMismatch
from topiclake.schema_registry._parsed import ParsedSchema
from topiclake.schema_registry.errors import InvalidSchema


def _types(schema: Any) -> set[str] | None:
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    t = schema["type"]
    return {t} if isinstance(t, str) else set(t)


def _widened(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else types


def _read_errors(reader: Any, writer: Any, path: str) -> list[str]:
    if reader is True or reader == {}:
        return []
    if writer is False:
        return []
    if reader is False:
        return [f"{path}: the reader accepts nothing"]
    if not isinstance(reader, dict) or not isinstance(writer, (dict, bool)):
        return []
    w: dict[str, Any] = writer if isinstance(writer, dict) else {}
    errors: list[str] = []
    r_types, w_types = _types(reader), _types(w)
    if r_types is not None:
        if w_types is None:
            errors.append(f"{path}: the writer allows any type, the reader only {sorted(r_types)}")
        elif w_types - _widened(r_types):
            errors.append(f"{path}: type changed from {sorted(w_types)} to {sorted(r_types)}")
    if "enum" in reader:
        missing = [v for v in w.get("enum", []) if v not in reader["enum"]]
        if missing or "enum" not in w:
            errors.append(f"{path}: the reader's enum lacks writer values {missing or '(any)'}")
    r_props: dict[str, Any] = reader.get("properties", {}) or {}
    w_props: dict[str, Any] = w.get("properties", {}) or {}
    newly_required = set(reader.get("required", [])) - set(w.get("required", []))
    for name in sorted(newly_required):
        errors.append(f"{path}: property {name!r} is required by the reader but not by the writer")
    for name, sub in r_props.items():
        if name in w_props:
            errors += _read_errors(sub, w_props[name], f"{path}.{name}")
    additional = reader.get("additionalProperties", True)
    for name in sorted(set(w_props) - set(r_props)):
        if additional is False:
            errors.append(f"{path}: property {name!r} was removed from a closed content model")
        elif isinstance(additional, dict):
            errors += _read_errors(additional, w_props[name], f"{path}.{name}")
    if "items" in reader and isinstance(reader["items"], (dict, bool)):
        errors += _read_errors(reader["items"], w.get("items", True), f"{path}[]")
    return errors


class JsonSchema(ParsedSchema):
    """A JSON Schema (draft 4 to 2020-12, by its ``$schema``; 2020-12 when it has none)."""

    schema_type = "JSON"

    def __init__(self, text: str, canonical: str, doc: Any, validator: Any) -> None:
        super().__init__(text, canonical)
        self.doc = doc
        self.validator = validator

    @classmethod
    def parse(cls, text: str, references: Sequence[tuple[str, str]]) -> JsonSchema:
        """Parse and check ``text``; references are reachable by their names as ``$ref`` targets."""
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from exc
        if not isinstance(doc, (dict, bool)):
            raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
        registry: Registry[Any] = Registry()
        try:
            for name, ref_text in references:
                registry = registry.with_resource(
                    name, Resource.from_contents(json.loads(ref_text), default_specification=DRAFT202012)
                )
            validator_class = jsonschema.validators.validator_for(
                doc, default=jsonschema.Draft202012Validator
            )
            validator_class.check_schema(doc)
        except jsonschema.exceptions.SchemaError as exc:
            raise InvalidSchema(f"Invalid schema: {exc.message}") from exc
        except (ValueError, TypeError) as exc:
            raise InvalidSchema(f"Invalid schema: {exc}") from exc
        canonical = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        return cls(text, canonical, doc, validator_class(doc, registry=registry))

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        """See the module docstring for the rules."""
        if not isinstance(writer, JsonSchema):
            return [f"cannot read {writer.schema_type} data with a JSON schema"]
        return _read_errors(self.doc, writer.doc, "#")

    def encode(self, value: Any) -> bytes:
        """The record as UTF-8 JSON after validating it.

        Raises:
            RecordSchemaMismatch: the value does not match the schema.
        """
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise RecordSchemaMismatch(f"record does not match the JSON schema at {where}: {error.message}")
        return json.dumps(value, separators=(",", ":")).encode()

    def decode(self, payload: bytes) -> Any:
        """The JSON value of a payload."""
        return json.loads(payload)
