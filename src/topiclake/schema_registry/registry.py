"""The schema registry's operations, as Confluent's Schema Registry defines them (no HTTP here).

Subjects hold numbered versions; each version points to a schema by its global id, and a schema registered
under several subjects keeps one id. Versions are soft-deleted first (hidden, their number never reused),
then may be deleted permanently. A new version must be compatible with the subject's earlier live versions
at the subject's level (its own, else the global one, BACKWARD by default).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from topiclake.platform.storage import Storage
from topiclake.schema_registry import compatibility, rules
from topiclake.schema_registry._settings import MODES, SubjectSettings
from topiclake.schema_registry.errors import (
    IncompatibleSchema,
    InvalidSchema,
    OperationNotPermitted,
    SchemaNotFound,
    SchemaVersionNotFound,
    SchemaVersionNotSoftDeleted,
    SchemaVersionSoftDeleted,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
)
from topiclake.schema_registry.formats import SCHEMA_TYPES, ParsedSchema, Reference, parse
from topiclake.schema_registry.store import RegistryState, SchemaStore, StoredSchema, row

logger = logging.getLogger(__name__)

__all__ = ["MODES", "RegisteredVersion", "SchemaRegistry"]


@dataclass(frozen=True)
class RegisteredVersion:
    """One version of a subject with its schema."""

    subject: str
    version: int
    schema: StoredSchema

    def to_json(self) -> dict[str, Any]:
        """Confluent's JSON form (``schemaType`` omitted for AVRO, as Confluent does)."""
        body: dict[str, Any] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema.schema_id,
            "schema": self.schema.schema,
        }
        if self.schema.schema_type != "AVRO":
            body["schemaType"] = self.schema.schema_type
        if self.schema.references:
            body["references"] = [r.to_json() for r in self.schema.references]
        return body


class SchemaRegistry(SubjectSettings):
    """The registry over one warehouse; every broker may hold one, and they agree through the table.

    Compatibility levels and modes come from :class:`~topiclake.schema_registry._settings.SubjectSettings`.

    Args:
        storage: The warehouse whose ``_system/schemas`` holds the registry.
        refresh_interval: See :class:`~topiclake.schema_registry.store.SchemaStore`.
    """

    def __init__(self, storage: Storage, refresh_interval: float = 0.5) -> None:
        self.store = SchemaStore(storage, refresh_interval)
        self._parsed: dict[int, ParsedSchema] = {}

    # ------------------------------------------------------------------ schemas

    def parse_new(
        self, schema: object, schema_type: object = None, references: object = None
    ) -> tuple[ParsedSchema, tuple[Reference, ...]]:
        """Parse a schema sent by a client (``schema``, ``schemaType``, ``references`` of a request).

        Raises:
            InvalidSchema: it does not parse, its type is unknown, or a reference does not resolve.
        """
        if not isinstance(schema, str) or not schema.strip():
            raise InvalidSchema("Invalid schema: 'schema' must be a non-empty string")
        stype = "AVRO" if schema_type in (None, "") else str(schema_type).upper()
        if stype not in SCHEMA_TYPES:
            raise InvalidSchema(f"Invalid schema type {schema_type!r}: use one of {', '.join(SCHEMA_TYPES)}")
        refs = rules.references(references)
        state = self.store.state()
        resolved = rules.resolve(state, refs, set())
        return parse(stype, schema, resolved), refs

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        """The schema with this id (soft-deleted versions keep their schema readable by id)."""
        schema = self.store.state().schemas.get(schema_id) or self.store.state(fresh=True).schemas.get(
            schema_id
        )
        if schema is None:
            raise SchemaNotFound(f"Schema {schema_id} not found", schema_id=schema_id)
        return schema

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The parsed schema with this id (cached: a schema never changes under its id)."""
        hit = self._parsed.get(schema_id)
        if hit is not None:
            return hit
        stored = self.schema_by_id(schema_id)
        state = self.store.state()
        result = parse(stored.schema_type, stored.schema, rules.resolve(state, stored.references, set()))
        self._parsed[schema_id] = result
        return result

    def versions_of_id(self, schema_id: int) -> list[tuple[str, int]]:
        """Every live ``(subject, version)`` that points at the schema."""
        self.schema_by_id(schema_id)
        state = self.store.state()
        return [
            (subject, v.version)
            for subject, versions in sorted(state.subjects.items())
            for v in sorted(versions.values(), key=lambda v: v.version)
            if v.schema_id == schema_id and not v.deleted
        ]

    # ------------------------------------------------------------------ subjects

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        """Subjects with a live version (or any version with ``deleted``), sorted."""
        state = self.store.state()
        return sorted(
            s
            for s, versions in state.subjects.items()
            if s.startswith(prefix) and any(deleted or not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        """The subject's version numbers, ascending.

        Raises:
            SubjectNotFound: it has no live version (no version at all with ``deleted``).
        """
        entries = rules.entries(self.store.state(), subject, deleted)
        return [v.version for v in entries]

    def get_version(self, subject: str, version: str | int, deleted: bool = False) -> RegisteredVersion:
        """A version of a subject (``latest`` or ``-1`` for the newest live one).

        Raises:
            SubjectNotFound, SchemaVersionNotFound, InvalidSchemaVersion.
        """
        wanted = rules.parse_version(version)
        state = self.store.state()
        entries = rules.entries(state, subject, deleted)
        if wanted is None:
            live = [v for v in entries if not v.deleted]
            if not live:
                raise SubjectNotFound(f"Subject '{subject}' not found.", subject=subject)
            entry = live[-1]
        else:
            found = next((v for v in entries if v.version == wanted), None)
            if found is None:
                raise SchemaVersionNotFound(f"Version {wanted} not found.", subject=subject, version=wanted)
            entry = found
        return RegisteredVersion(subject, entry.version, state.schemas[entry.schema_id])

    def lookup(
        self,
        subject: str,
        schema: object,
        schema_type: object = None,
        references: object = None,
        deleted: bool = False,
    ) -> RegisteredVersion:
        """The version of ``subject`` that holds this schema (``POST /subjects/{subject}``).

        Raises:
            SubjectNotFound, SchemaNotFound, InvalidSchema.
        """
        state = self.store.state(fresh=True)
        entries = rules.entries(state, subject, deleted)
        parsed, refs = self.parse_new(schema, schema_type, references)
        for entry in reversed(entries):
            stored = state.schemas[entry.schema_id]
            if stored.references == refs and self._same(state, stored, parsed):
                return RegisteredVersion(subject, entry.version, stored)
        raise SchemaNotFound("Schema not found", subject=subject)

    def register(
        self,
        subject: str,
        schema: object,
        schema_type: object = None,
        references: object = None,
        normalize: bool = False,
    ) -> int:
        """Register a schema under a subject; returns its id (the existing one if already there).

        Raises:
            InvalidSchema: it does not parse.
            IncompatibleSchema: it breaks the subject's compatibility level.
            OperationNotPermitted: the subject or the registry is READONLY.
        """
        del normalize  # schemas are compared in canonical form always
        parsed, refs = self.parse_new(schema, schema_type, references)
        result: dict[str, int] = {}

        def compute(state: RegistryState) -> list[dict[str, Any]]:
            result.clear()
            if rules.mode(state, subject) == "READONLY":
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode", subject=subject)
            versions = state.subjects.get(subject, {})
            live = sorted((v for v in versions.values() if not v.deleted), key=lambda v: v.version)
            for entry in live:
                stored = state.schemas[entry.schema_id]
                if stored.references == refs and self._same(state, stored, parsed):
                    result["id"] = stored.schema_id
                    return []
            level = rules.level(state, subject)
            earlier = [(v.version, self._parse_stored(state, state.schemas[v.schema_id])) for v in live]
            reasons = compatibility.check(level, parsed, earlier)
            if reasons:
                raise IncompatibleSchema(
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f'"{subject}", details: [{"; ".join(reasons)}]',
                    subject=subject,
                )
            sid = next(
                (
                    s.schema_id
                    for s in state.schemas.values()
                    if s.schema_type == parsed.schema_type
                    and s.references == refs
                    and self._same(state, s, parsed)
                ),
                state.next_id(),
            )
            version = max(versions, default=0) + 1
            result["id"] = sid
            return [
                row(
                    "schema",
                    subject,
                    version,
                    schema_id=sid,
                    schema_type=parsed.schema_type,
                    schema=parsed.text,
                    references=json.dumps([r.to_json() for r in refs]),
                )
            ]

        self.store.change(compute)
        logger.info("subject %s: schema id %d", subject, result["id"])
        return result["id"]

    def check_compatibility(
        self,
        subject: str,
        version: str | int | None,
        schema: object,
        schema_type: object = None,
        references: object = None,
    ) -> list[str]:
        """Why the schema is not compatible with the version (``None``: with all the subject's versions
        the level asks for); empty when it is."""
        parsed, _refs = self.parse_new(schema, schema_type, references)
        state = self.store.state(fresh=True)
        level = rules.level(state, subject)
        if version is None:
            live = [v for v in state.subjects.get(subject, {}).values() if not v.deleted]
            earlier = [(v.version, self._parse_stored(state, state.schemas[v.schema_id])) for v in live]
            return compatibility.check(level, parsed, sorted(earlier, key=lambda p: p[0]))
        one = self.get_version(subject, version)
        return compatibility.check(
            level.removesuffix("_TRANSITIVE"), parsed, [(one.version, self._parse_stored(state, one.schema))]
        )

    def delete_version(self, subject: str, version: str | int, permanent: bool = False) -> int:
        """Soft-delete a version, or delete a soft-deleted one permanently; returns its number."""
        wanted = rules.parse_version(version)
        result: dict[str, int] = {}

        def compute(state: RegistryState) -> list[dict[str, Any]]:
            self._writable(state, subject)
            entries = rules.entries(state, subject, deleted=True)
            if wanted is None:
                live = [v for v in entries if not v.deleted]
                if not live:
                    raise SubjectNotFound(f"Subject '{subject}' not found.", subject=subject)
                entry = live[-1]
            else:
                found = next((v for v in entries if v.version == wanted), None)
                if found is None:
                    raise SchemaVersionNotFound(
                        f"Version {wanted} not found.", subject=subject, version=wanted
                    )
                entry = found
            rules.not_referenced(state, subject, entry)
            result["version"] = entry.version
            if permanent:
                if not entry.deleted:
                    raise SchemaVersionNotSoftDeleted(
                        f"Subject '{subject}' Version {entry.version} was not deleted first before being "
                        "permanently deleted",
                        subject=subject,
                    )
                return [row("hard_delete", subject, entry.version)]
            if entry.deleted:
                raise SchemaVersionSoftDeleted(
                    f"Subject '{subject}' Version {entry.version} was soft deleted. Set permanent=true to "
                    "delete permanently",
                    subject=subject,
                )
            return [row("soft_delete", subject, entry.version)]

        self.store.change(compute)
        return result["version"]

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft-delete every version of a subject, or permanently delete a soft-deleted subject."""
        result: list[int] = []

        def compute(state: RegistryState) -> list[dict[str, Any]]:
            result.clear()
            self._writable(state, subject)
            entries = rules.entries(state, subject, deleted=True)
            live = [v for v in entries if not v.deleted]
            for entry in entries:
                rules.not_referenced(state, subject, entry)
            result.extend(v.version for v in entries if permanent or not v.deleted)
            if permanent:
                if live:
                    raise SubjectNotSoftDeleted(
                        f"Subject '{subject}' was not deleted first before being permanently deleted",
                        subject=subject,
                    )
                return [row("hard_delete", subject, v.version) for v in entries]
            if not live:
                raise SubjectSoftDeleted(
                    f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
                    subject=subject,
                )
            return [row("soft_delete", subject, v.version) for v in live]

        self.store.change(compute)
        return result

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        """Ids of the schemas that reference this version."""
        one = self.get_version(subject, version)
        state = self.store.state()
        return sorted(
            s.schema_id
            for s in state.schemas.values()
            if any(r.subject == subject and r.version == one.version for r in s.references)
        )

    # ------------------------------------------------------------------ helpers

    def _parse_stored(self, state: RegistryState, stored: StoredSchema) -> ParsedSchema:
        hit = self._parsed.get(stored.schema_id)
        if hit is None:
            hit = parse(stored.schema_type, stored.schema, rules.resolve(state, stored.references, set()))
            self._parsed[stored.schema_id] = hit
        return hit

    def _same(self, state: RegistryState, stored: StoredSchema, parsed: ParsedSchema) -> bool:
        """Whether ``stored`` is ``parsed`` (never refreshes: callers may be iterating ``state``)."""
        if stored.schema_type != parsed.schema_type:
            return False
        if stored.schema == parsed.text:
            return True
        return self._parse_stored(state, stored).canonical == parsed.canonical

    def _writable(self, state: RegistryState, subject: str) -> None:
        if rules.mode(state, subject) == "READONLY":
            raise OperationNotPermitted(f"Subject {subject} is in read-only mode", subject=subject)
