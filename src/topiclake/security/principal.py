"""Who is asking: Kafka's ``KafkaPrincipal`` (``User:alice``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """An authenticated identity, written ``<type>:<name>`` as Kafka does.

    Attributes:
        type: The principal type; topiclake only makes ``User`` principals.
        name: The user's name (or a certificate subject, or a token's ``sub``).
    """

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """Parse ``"User:alice"``.

        Raises:
            ValueError: The text is not ``<type>:<name>`` with both parts non-empty.
        """
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is written <type>:<name>, e.g. User:alice (got {text!r})")
        return cls(kind, name)


#: The principal of a request that carried no credentials (Kafka's name for it).
ANONYMOUS = Principal("User", "ANONYMOUS")
