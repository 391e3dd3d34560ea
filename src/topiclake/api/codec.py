"""Keys and values between JSON bodies and bytes: `json` (any JSON value), `binary` (base64), `string`."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

import orjson

from topiclake.errors import InvalidRecord

Encoding = Literal["json", "binary", "string"]
ENCODINGS: tuple[str, ...] = ("json", "binary", "string")


def encode(value: Any, encoding: str, what: str = "value") -> bytes | None:
    """Turn a JSON-decoded key or value into the bytes to store (None stays None: a null key/tombstone).

    Raises:
        InvalidRecord: bad base64, a non-string for ``binary``/``string``, or an unknown encoding.
    """
    if value is None:
        return None
    if encoding == "json":
        return orjson.dumps(value)
    if encoding == "binary":
        if not isinstance(value, str):
            raise InvalidRecord(
                f"{what} must be a base64 string in binary format, not {type(value).__name__}"
            )
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRecord(f"{what} is not valid base64: {exc}") from exc
    if encoding == "string":
        if not isinstance(value, str):
            raise InvalidRecord(f"{what} must be a string in string format, not {type(value).__name__}")
        return value.encode()
    raise InvalidRecord(f"unknown encoding {encoding!r}: use one of {', '.join(ENCODINGS)}")


def decode(data: bytes | None, encoding: str) -> Any:
    """Turn stored bytes into a JSON-ready key or value for a response.

    ``json`` falls back to a UTF-8 string, then to base64, for bytes that are not JSON, so a consumer never
    fails on one odd record.
    """
    if data is None:
        return None
    if encoding == "binary":
        return base64.b64encode(data).decode()
    if encoding == "string":
        return data.decode("utf-8", errors="replace")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return data.decode()
        except UnicodeDecodeError:
            return base64.b64encode(data).decode()


def decode_column(column: list[bytes | None], encoding: str) -> list[Any]:
    """:func:`decode` of every item of a column, in one comprehension (a fetch of 1,000 records spent
    most of its time in the two calls per record it replaces)."""
    if encoding == "binary":
        b64 = binascii.b2a_base64
        return [None if v is None else b64(v, newline=False).decode() for v in column]
    if encoding == "string":
        return [None if v is None else v.decode("utf-8", errors="replace") for v in column]
    return [decode(v, encoding) for v in column]


def encode_headers(headers: Any, encoding: str = "binary") -> list[tuple[str, bytes | None]] | None:
    """Headers from a body: ``[{"key": k, "value": v}]`` (Confluent v3 style, value base64 unless
    ``encoding`` says otherwise) or ``{"k": "v"}`` (string values)."""
    if headers is None:
        return None
    out: list[tuple[str, bytes | None]] = []
    if isinstance(headers, dict):
        for k, v in headers.items():
            out.append((str(k), None if v is None else str(v).encode()))
        return out
    if not isinstance(headers, list):
        raise InvalidRecord("headers must be a list of {key, value} objects or an object of strings")
    for h in headers:
        if not isinstance(h, dict) or "key" not in h or not isinstance(h["key"], str):
            raise InvalidRecord("each header must be an object with a string 'key' and a 'value'")
        out.append((h["key"], encode(h.get("value"), encoding, what=f"header {h['key']!r}")))
    return out


def header_dicts(headers: Any, encoding: str = "binary") -> list[dict[str, Any]] | None:
    """Headers as Arrow-ready ``[{"key", "value"}]`` dicts (see :func:`encode_headers` for the inputs)."""
    pairs = encode_headers(headers, encoding)
    return None if pairs is None else [{"key": k, "value": v} for k, v in pairs]
