"""Compatibility levels and modes of the schema registry's subjects (and the global ones).

Confluent's ``/config`` and ``/mode`` resources; :class:`~topiclake.schema_registry.registry.SchemaRegistry`
inherits them. A subject without a level of its own follows the global one (BACKWARD by default); a
subject without a mode follows the global mode (READWRITE by default).
"""

from __future__ import annotations

from typing import Final

from topiclake.schema_registry import compatibility, rules
from topiclake.schema_registry.errors import InvalidMode, SubjectConfigNotFound
from topiclake.schema_registry.store import SchemaStore, row

__all__ = ["MODES", "SubjectSettings"]

MODES: Final = ("READWRITE", "READONLY", "IMPORT")


class SubjectSettings:
    """The ``/config`` and ``/mode`` operations over a registry's :class:`SchemaStore`."""

    store: SchemaStore

    def get_config(self, subject: str | None = None, default_to_global: bool = False) -> str:
        """The compatibility level of a subject (its own), or the global one."""
        state = self.store.state()
        if subject is None:
            return state.configs.get(None, compatibility.DEFAULT_LEVEL)
        level = state.configs.get(subject)
        if level is None:
            if default_to_global:
                return state.configs.get(None, compatibility.DEFAULT_LEVEL)
            raise SubjectConfigNotFound(
                f"Subject '{subject}' does not have subject-level compatibility configured"
            )
        return level

    def set_config(self, subject: str | None, level: object) -> str:
        """Set the level of a subject (or the global one); returns it."""
        value = compatibility.validate_level(level)
        self.store.change(lambda state: [row("config", subject, value=value)])
        return value

    def delete_config(self, subject: str | None) -> str:
        """Remove a subject's own level (or reset the global one); returns the level it had."""
        before = self.get_config(subject, default_to_global=subject is not None)
        self.store.change(lambda state: [row("config", subject, value=None)])
        return before

    def get_mode(self, subject: str | None = None) -> str:
        """The mode of a subject (else the global one), READWRITE by default."""
        return rules.mode(self.store.state(), subject)

    def set_mode(self, subject: str | None, mode: object) -> str:
        """Set the mode of a subject (or the global one); returns it."""
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise InvalidMode(f"Invalid mode {mode!r}: use one of {', '.join(MODES)}")
        value = mode.upper()
        self.store.change(lambda state: [row("mode", subject, value=value)])
        return value
