"""One registered version of a value subject, as the typed views use it.

Shared by :mod:`topiclake.spark.typed_views` (which re-exports it) and :mod:`topiclake.spark._typed_protobuf`,
so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TypedVersion:
    """One version of a value subject: its schema id, type and text (and, for PROTOBUF, the ``(name,
    text)`` of the schemas it references, dependencies first)."""

    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[tuple[str, str], ...] = ()
