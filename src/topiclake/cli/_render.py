"""How consumed records are printed: kcat-style formats and JSON lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from topiclake.cli._app import Encoding, unescape

if TYPE_CHECKING:
    from topiclake.client import FetchedRecord

# ---------------------------------------------------------------------------------------------- consume

_FORMAT_TOKENS = "kvopTthKS%"


def parse_format(fmt: str) -> list[str]:
    """A kcat-style format as literal strings and ``%x`` tokens."""
    parts: list[str] = []
    text = unescape(fmt)
    literal: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 1 < len(text):
            token = text[i + 1]
            if token not in _FORMAT_TOKENS:
                raise typer.BadParameter(f"unknown token %{token}; use %k %v %o %p %t %T %h %K %S %%")
            if token == "%":
                literal.append("%")
            else:
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append("%" + token)
            i += 2
            continue
        literal.append(c)
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


def render(parts: list[str], topic: str, partition: int, r: FetchedRecord) -> bytes:
    from topiclake.client import decode_bytes

    out: list[bytes] = []
    for part in parts:
        if not part.startswith("%") or len(part) != 2:
            out.append(part.encode())
            continue
        t = part[1]
        if t == "k":
            out.append(decode_bytes(r["key"]) or b"")
        elif t == "v":
            out.append(decode_bytes(r["value"]) or b"")
        elif t == "o":
            out.append(str(r["offset"]).encode())
        elif t == "p":
            out.append(str(partition).encode())
        elif t == "t":
            out.append(topic.encode())
        elif t == "T":
            out.append(str(r["timestamp"]).encode())
        elif t == "K":
            key = decode_bytes(r["key"])
            out.append(str(-1 if key is None else len(key)).encode())
        elif t == "S":
            value = decode_bytes(r["value"])
            out.append(str(-1 if value is None else len(value)).encode())
        elif t == "h":
            out.append(
                b",".join(h["key"].encode() + b"=" + (decode_bytes(h["value"]) or b"") for h in r["headers"])
            )
    return b"".join(out)


def as_json(topic: str, partition: int, r: FetchedRecord, encoding: Encoding) -> bytes:
    import base64

    import orjson

    from topiclake.client import decode_bytes

    def conv(data: str | None) -> object:
        raw = decode_bytes(data)
        if raw is None or encoding is Encoding.binary:
            return data if raw is not None else None
        text = raw.decode("utf-8", errors="replace")
        if encoding is Encoding.json:
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return text if text.encode() == raw else base64.b64encode(raw).decode()
        return text

    doc = {
        "topic": topic,
        "partition": partition,
        "offset": r["offset"],
        "timestamp": r["timestamp"],
        "timestamp_type": r["timestamp_type"],
        "key": conv(r["key"]),
        "value": conv(r["value"]),
        "headers": [{"key": h["key"], "value": conv(h["value"])} for h in r["headers"]],
    }
    return orjson.dumps(doc) + b"\n"
