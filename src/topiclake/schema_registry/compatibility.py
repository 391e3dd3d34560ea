"""Compatibility levels and the check of a new schema against a subject's earlier versions.

BACKWARD: the new schema reads data written with the latest earlier version (consumers upgrade first).
FORWARD: the latest earlier version reads data written with the new schema (producers upgrade first).
FULL: both. The ``_TRANSITIVE`` forms check against every earlier live version, not only the latest.
NONE: no check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from topiclake.schema_registry.errors import InvalidCompatibilityLevel
from topiclake.schema_registry.formats import ParsedSchema

__all__ = ["DEFAULT_LEVEL", "LEVELS", "check", "validate_level"]

LEVELS: Final = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
#: Confluent's default.
DEFAULT_LEVEL: Final = "BACKWARD"


def validate_level(level: object) -> str:
    """The level, upper-cased; raises :class:`InvalidCompatibilityLevel` for anything else."""
    if isinstance(level, str) and level.upper() in LEVELS:
        return level.upper()
    raise InvalidCompatibilityLevel(
        f"Invalid compatibility level {level!r}: use one of {', '.join(LEVELS)}", level=str(level)[:40]
    )


def check(level: str, new: ParsedSchema, earlier: Sequence[tuple[int, ParsedSchema]]) -> list[str]:
    """Why ``new`` is not compatible with ``earlier`` (``(version, schema)``, oldest first) at ``level``.

    Returns:
        The reasons, each naming the earlier version; empty when compatible.
    """
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    base = level.removesuffix("_TRANSITIVE")
    reasons: list[str] = []
    for version, old in against:
        if old.schema_type != new.schema_type:
            reasons.append(f"version {version} is {old.schema_type}, the new schema {new.schema_type}")
            continue
        if base in ("BACKWARD", "FULL"):
            reasons += [f"{m} (new schema reading data of version {version})" for m in new.read_errors(old)]
        if base in ("FORWARD", "FULL"):
            reasons += [
                f"{m} (version {version} reading data of the new schema)" for m in old.read_errors(new)
            ]
    return reasons
