"""Parsing what REST Proxy v3 produce requests send: one record object (formats, headers, timestamps) and a
stream of concatenated, newline-delimited or array-wrapped JSON objects split without parsing it whole.

Split from :mod:`.rest_v3_records` (its docstring tells the API), which re-exports the public names.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from topiclake import errors as e
from topiclake.api.errors import HTTPError
from topiclake.api.routes._rest_v3 import bad_request
from topiclake.platform import Record
from topiclake.platform.records import now_ms
from topiclake.schema_registry import rest_proxy as schema_rest

_FORMATS = ("BINARY", "JSON", "STRING")


_SCHEMA_FORMATS = ("AVRO", "JSONSCHEMA", "PROTOBUF")


_SCHEMA_FIELDS = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")


_RECORD_FIELDS = frozenset({"id", "partition_id", "headers", "key", "value", "timestamp"})


_BATCH_ID = re.compile(r"[0-9a-zA-Z_-]{1,80}")


_MAX_TIMESTAMP_S = 253_402_300_799  # 9999-12-31T23:59:59Z


@dataclass
class Parsed:
    """One record of a request, ready to produce, or the error that keeps it from being produced."""

    record: Record | None = None
    error: e.TopiclakeError | None = None
    key_type: str | None = None
    value_type: str | None = None
    key_size: int = 0
    value_size: int = 0
    id: str | None = None
    #: key/value objects in a schema format, serialized in the threadpool before producing
    deferred: dict[str, Any] | None = None
    schema_info: dict[str, dict[str, Any]] | None = None


def _data(obj: Any, what: str) -> tuple[bytes | None, str | None]:
    """Serialize ``{"type", "data"}`` into bytes; return (bytes, type reported back or None)."""
    if obj is None:
        return None, None
    if not isinstance(obj, dict):
        raise bad_request(f'{what} must be an object like {{"type": "JSON", "data": ...}}')
    raw_type = obj.get("type")
    if raw_type is not None and not isinstance(raw_type, str):
        raise bad_request(f"{what}.type must be one of {', '.join(_FORMATS)}")
    fmt = raw_type.upper() if raw_type is not None else None
    if fmt in _SCHEMA_FORMATS or any(obj.get(f) is not None for f in _SCHEMA_FIELDS):
        raise bad_request(
            f"{what}: schemas are not supported (no Schema Registry); use BINARY, JSON or STRING"
        )
    if fmt is not None and fmt not in _FORMATS:
        raise bad_request(f"{what}.type {raw_type!r} is not one of {', '.join(_FORMATS)}")
    data = obj.get("data")
    if data is None:
        return None, fmt
    if fmt == "JSON":
        return orjson.dumps(data), fmt
    if fmt == "STRING":
        if not isinstance(data, str):
            raise bad_request(f"{what}.data must be a string for type STRING, not {type(data).__name__}")
        return data.encode(), fmt
    # BINARY, also the format of data without a type (Confluent's serializer falls back to it)
    if not isinstance(data, str):
        raise bad_request(f"{what}.data must be a base64 string for type BINARY, not {type(data).__name__}")
    try:
        return base64.b64decode(data, validate=True), fmt
    except (binascii.Error, ValueError) as exc:
        raise bad_request(f"{what}.data is not a valid base64 string: {exc}") from exc


def _headers(raw: Any) -> list[tuple[str, bytes | None]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise bad_request('headers must be a list of {"name", "value"} objects')
    out: list[tuple[str, bytes | None]] = []
    for h in raw:
        name = h.get("name", h.get("key")) if isinstance(h, dict) else None  # "key": Karapace/v2 spelling
        if not isinstance(name, str):
            raise bad_request('each header needs a string "name"')
        value = h.get("value")
        if value is not None and not isinstance(value, str):
            raise bad_request(f"the value of header {name!r} must be a base64 string or null")
        try:
            out.append((name, None if value is None else base64.b64decode(value, validate=True)))
        except (binascii.Error, ValueError) as exc:
            raise bad_request(f"the value of header {name!r} is not valid base64: {exc}") from exc
    return out


def _timestamp_ms(raw: Any) -> int:
    """ISO-8601 date-time (Confluent), or a number of seconds since the epoch (Jackson's reading)."""
    if raw is None:
        return now_ms()
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError as exc:
            raise bad_request(f"timestamp {raw!r} is not an ISO-8601 date-time") from exc
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        if dt.timestamp() < 0:
            raise bad_request(f"timestamp {raw!r} is before the epoch")
        return int(dt.timestamp() * 1000)
    if isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= _MAX_TIMESTAMP_S:
        return int(raw * 1000)
    raise bad_request(f"timestamp must be an ISO-8601 date-time string, not {raw!r}")


def parse_record(obj: Any, with_id: bool = False) -> Parsed:
    """Turn one decoded produce request into a record; problems become the record's error (never raised)."""
    try:
        if not isinstance(obj, dict):
            raise bad_request(f"a record must be a JSON object, not {type(obj).__name__}")
        unknown = set(obj) - _RECORD_FIELDS
        if unknown:
            raise bad_request(
                f"unrecognized field(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_RECORD_FIELDS))}"
            )
        rid = obj.get("id")
        if with_id and (not isinstance(rid, str) or not _BATCH_ID.fullmatch(rid)):
            raise HTTPError(422, 422, "Batch entry identifier not a valid string.", code="invalid_request")
        partition = obj.get("partition_id")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
            raise bad_request(f"partition_id must be an integer, not {partition!r}")
        deferred = {s: obj[s] for s in ("key", "value") if schema_rest.is_schema_data(obj.get(s))}
        key, key_type = _data(None if "key" in deferred else obj.get("key"), "key")
        value, value_type = _data(None if "value" in deferred else obj.get("value"), "value")
        record = Record(
            key, value, _headers(obj.get("headers")), _timestamp_ms(obj.get("timestamp")), partition
        )
        return Parsed(
            record, None, key_type, value_type, len(key or b""), len(value or b""), rid, deferred or None
        )
    except e.TopiclakeError as exc:
        return Parsed(
            error=exc, id=obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
        )


def parse_bytes(raw: bytes) -> Parsed:
    """Parse one JSON object of a stream."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Parsed(error=bad_request(f"Error processing JSON: {exc}"))
    return parse_record(obj)


class FramingError(Exception):
    """The stream is no longer a sequence of JSON objects: nothing after this point can be read."""


_SEPARATORS = re.compile(rb"[\s,\[\]]*")  # between objects: whitespace, NDJSON newlines, a wrapping array


_OUTSIDE = re.compile(rb'[{}"]')


_INSIDE = re.compile(rb'["\\]')


class JsonObjectSplitter:
    """Split a byte stream into complete top-level JSON objects by brace matching that respects strings.

    Handles concatenated JSON (Confluent), newline-delimited JSON and objects inside one top-level array.
    Each object is decoded (and validated) separately, so a malformed object is an error of its own.

    Args:
        limit: Largest object, in bytes; a longer one is a :class:`FramingError`.
    """

    def __init__(self, limit: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._limit = limit

    def feed(self, chunk: bytes) -> tuple[list[bytes], FramingError | None]:
        """Add bytes; return the objects completed by them, and the framing error that stopped the split.

        After an error the rest of the stream cannot be split; the objects before it are still returned.
        """
        buf = self._buf
        buf += chunk
        out: list[bytes] = []
        i, start = self._pos, 0
        while i < len(buf):
            if self._depth == 0:
                sep = _SEPARATORS.match(buf, i)
                i = sep.end() if sep else i
                if i == len(buf):
                    break
                if buf[i] != ord("{"):
                    return out, FramingError(f"expected a JSON object, found {chr(buf[i])!r}")
                start, self._depth, i = i, 1, i + 1
            elif self._in_string:
                m = _INSIDE.search(buf, i)
                if m is None:
                    i = len(buf)
                elif m.group() == b"\\":
                    i = m.end() + 1  # may point past the end: the escaped byte is still to come
                else:
                    self._in_string, i = False, m.end()
            else:
                m = _OUTSIDE.search(buf, i)
                if m is None:
                    i = len(buf)
                    continue
                c, i = m.group(), m.end()
                if c == b'"':
                    self._in_string = True
                elif c == b"{":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        out.append(bytes(buf[start:i]))
                        start = i
        keep_from = start if self._depth else min(i, len(buf))
        del buf[:keep_from]
        self._pos = i - keep_from
        if len(buf) > self._limit:
            return out, FramingError(f"a record is larger than the request limit of {self._limit} bytes")
        return out, None

    def finish(self) -> None:
        """Check that the stream did not end inside an object."""
        if self._depth or self._in_string:
            raise FramingError("the request body ended inside a JSON object")
