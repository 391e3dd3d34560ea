"""How the message browser shows keys, values and headers: text, pretty JSON, hex, or a plugged-in decoder.

The schema registry is not built yet. When it is, it plugs in here without touching the pages::

    from topiclake.console.render import register_decoder
    register_decoder("avro (schema registry)", my_decoder)   # (topic, is_key, data) -> str

and the name appears in the browser's format menu.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

Decoder = Callable[[str, bool, bytes], str]
"""``(topic, is_key, data) -> text`` for a record's key or value; raise ValueError when it cannot."""

_DECODERS: dict[str, Decoder] = {}
BUILTIN_FORMATS = ("text", "json", "hex")


def register_decoder(name: str, decoder: Decoder) -> None:
    """Offer ``decoder`` in the message browser under ``name`` (e.g. a schema registry's)."""
    _DECODERS[name] = decoder


def formats() -> list[str]:
    """Every format the browser offers: the built-in ones, then registered decoders."""
    return [*BUILTIN_FORMATS, *sorted(_DECODERS)]


def _hex(data: bytes) -> str:
    return "\n".join(data[i : i + 16].hex(" ") for i in range(0, len(data), 16))


def show(data: bytes | None, fmt: str, topic: str = "", is_key: bool = False) -> tuple[str, str]:
    """(text, how) of bytes in a format; ``how`` says what was done when the format did not fit.

    ``json`` pretty-prints valid JSON and falls back to text; ``text`` falls back to hex for bytes that are
    not UTF-8; a registered decoder that fails falls back to hex.
    """
    if data is None:
        return "null", "null"
    if fmt in _DECODERS:
        try:
            return _DECODERS[fmt](topic, is_key, data), fmt
        except ValueError:
            return _hex(data), "hex"
    if fmt == "hex":
        return _hex(data), "hex"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _hex(data), "hex"
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False), "json"
        except ValueError:
            return text, "text"
    return text, "text"


@dataclass(frozen=True)
class ShownRecord:
    """One record as the browser shows it."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    key_how: str
    value: str
    value_how: str
    headers: list[tuple[str, str]]
    size: int
