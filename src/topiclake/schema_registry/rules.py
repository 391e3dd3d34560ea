"""Rules over a registry state: versions, references, levels and modes (no I/O; used by the registry)."""

from __future__ import annotations

from collections.abc import Sequence

from topiclake.schema_registry import compatibility
from topiclake.schema_registry.errors import (
    InvalidSchema,
    InvalidSchemaVersion,
    ReferenceExists,
    SubjectNotFound,
)
from topiclake.schema_registry.formats import Reference
from topiclake.schema_registry.store import RegistryState, VersionEntry


def parse_version(raw: str | int) -> int | None:
    """A version from a path: an integer from 1, or ``latest``/``-1`` (returned as None)."""
    text = str(raw)
    if text in ("latest", "-1"):
        return None
    if text.isascii() and text.isdigit() and 0 < len(text) < 10 and int(text) > 0:
        return int(text)
    raise InvalidSchemaVersion(
        f"The specified version '{text[:20]}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"'
    )


def references(raw: object) -> tuple[Reference, ...]:
    """The references of a request (``[{name, subject, version}]``); raises InvalidSchema."""
    if raw in (None, []):
        return ()
    if not isinstance(raw, list):
        raise InvalidSchema("Invalid schema: 'references' must be a list of {name, subject, version}")
    out: list[Reference] = []
    for r in raw:
        if not (isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("subject"), str)):
            raise InvalidSchema("Invalid schema: each reference needs a name, a subject and a version")
        version = r.get("version", -1)
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidSchema(f"Invalid schema: reference {r['name']!r} has a bad version")
        out.append(Reference(r["name"], r["subject"], version))
    return tuple(out)


def resolve(
    state: RegistryState, refs: Sequence[Reference], seen: set[tuple[str, int]]
) -> list[tuple[str, str]]:
    """``(name, text)`` of every referenced schema, transitively, dependencies first."""
    out: list[tuple[str, str]] = []
    for ref in refs:
        versions = state.subjects.get(ref.subject, {})
        live = sorted(v.version for v in versions.values() if not v.deleted)
        number = live[-1] if ref.version == -1 and live else ref.version
        entry = versions.get(number)
        if entry is None:
            raise InvalidSchema(
                f"Invalid schema: reference {ref.name!r} to subject {ref.subject!r} version "
                f"{ref.version} does not exist"
            )
        if (ref.subject, number) in seen:
            continue
        seen.add((ref.subject, number))
        stored = state.schemas[entry.schema_id]
        out += resolve(state, stored.references, seen)
        out.append((ref.name, stored.schema))
    return out


def entries(state: RegistryState, subject: str, deleted: bool) -> list[VersionEntry]:
    """The subject's versions, ascending (soft-deleted ones with ``deleted``); raises SubjectNotFound."""
    versions = state.subjects.get(subject, {})
    entries = sorted((v for v in versions.values() if deleted or not v.deleted), key=lambda v: v.version)
    if not entries:
        raise SubjectNotFound(f"Subject '{subject}' not found.", subject=subject)
    return entries


def level(state: RegistryState, subject: str) -> str:
    """The compatibility level that applies to a subject."""
    return state.configs.get(subject) or state.configs.get(None, compatibility.DEFAULT_LEVEL)


def mode(state: RegistryState, subject: str | None) -> str:
    """The mode that applies to a subject (or the global one)."""
    return state.modes.get(subject) or state.modes.get(None, "READWRITE")


def not_referenced(state: RegistryState, subject: str, entry: VersionEntry) -> None:
    """Raise ReferenceExists when a live schema references this version."""
    for s in state.schemas.values():
        if any(r.subject == subject and r.version == entry.version for r in s.references):
            users = [
                sub
                for sub, vs in state.subjects.items()
                for v in vs.values()
                if v.schema_id == s.schema_id and not v.deleted
            ]
            if users:
                raise ReferenceExists(
                    f"One or more references exist to the schema {{subject={subject}, "
                    f"version={entry.version}}}",
                    subject=subject,
                )
