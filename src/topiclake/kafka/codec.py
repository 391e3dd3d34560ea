"""Kafka messages through kio: parse a request frame, encode a response from one neutral dict.

kio (generated from Apache Kafka's JSON message definitions) has one frozen dataclass per API, version and
direction. Handlers answer with plain dicts; :func:`build` fits such a dict to whatever version the client
speaks, dropping fields that version lacks and converting ms to kio's datetime/timedelta types.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id


class FrameError(Exception):
    """A request frame that cannot be understood: the connection that sent it is closed."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A parsed request: its header fields and its kio body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    connection: Any = None  # the server's per-connection state (ConnectionState)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from the first 8 bytes of a request frame."""
    if len(frame) < _HEAD.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, version, correlation_id = _HEAD.unpack_from(frame)
    return int(api_key), int(version), int(correlation_id)


@functools.cache
def _request_reader(api_key: int, version: int) -> tuple[Any, Any, Any]:
    cls = load_request_schema(api_key, version)
    return cls, entity_reader(cls.__header_schema__), entity_reader(cls)


def parse_request(frame: bytes) -> Request:
    """Parse a whole request frame (without its 4-byte size).

    Raises:
        FrameError: kio has no schema for the key and version, or the bytes do not parse.
    """
    api_key, version, correlation_id = peek_header(frame)
    try:
        _cls, read_header, read_body = _request_reader(api_key, version)
    except Exception as exc:
        raise FrameError(f"no schema for api key {api_key} version {version}") from exc
    try:
        header, n = read_header(frame, 0)
        body, _m = read_body(frame, n)
    except Exception as exc:
        raise FrameError(f"api key {api_key} v{version}: malformed request: {exc}") from exc
    missing = _null_field(body)
    if missing is not None:  # kio reads a null array or string even where the schema forbids one
        raise FrameError(f"api key {api_key} v{version}: malformed request: {missing} is null")
    # Trailing bytes are ignored, as Kafka's own parser does (librdkafka's Metadata v12 carries 3).
    return Request(api_key, version, correlation_id, header.client_id, body)


def _null_field(entity: Any) -> str | None:
    """The name of a non-nullable field of a parsed entity (or of its nested entities) that is None."""
    kind: type = type(entity)
    for f in _fields(kind):
        value = getattr(entity, f.name)
        if value is None:
            if not f.optional:
                return f.name
        elif f.nested is not None:
            for item in value if f.is_tuple else (value,):
                found = _null_field(item)
                if found is not None:
                    return f"{f.name}.{found}"
    return None


def has_schema(api_key: int, version: int) -> bool:
    """Whether kio knows this request's version."""
    try:
        _request_reader(api_key, version)
    except Exception:
        return False
    return True


@functools.cache
def _response_writers(api_key: int, version: int) -> tuple[Any, Any, Any, Any]:
    cls = load_response_schema(api_key, version)
    header_cls = cls.__header_schema__
    return cls, header_cls, entity_writer(header_cls), entity_writer(cls)


def encode_response(api_key: int, version: int, correlation_id: int, data: dict[str, Any]) -> bytes:
    """A whole response frame, size prefix included, for ``data`` fitted to ``version``."""
    cls, header_cls, write_header, write_body = _response_writers(api_key, version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_cls(correlation_id=correlation_id))
    write_body(buf, build(cls, data))
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kafka_type: str | None
    nested: type | None
    is_tuple: bool
    optional: bool
    has_default: bool


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        optional = False
        args = typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            optional = type(None) in args
            hint = next(a for a in args if a is not type(None))
            args = typing.get_args(hint)
        is_tuple = typing.get_origin(hint) is tuple
        inner = args[0] if is_tuple else hint
        nested = inner if dataclasses.is_dataclass(inner) else None
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        out.append(_Field(f.name, f.metadata.get("kafka_type"), nested, is_tuple, optional, has_default))  # type: ignore[arg-type]
    return tuple(out)


_ZERO: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": uuid.UUID(int=0),
    "error_code": ErrorCode.none,
    "timedelta_i32": 0,
    "timedelta_i64": 0,
    "float64": 0.0,
}


def _convert(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
    if kafka_type == "datetime_i64":
        if value is None or int(value) < 0:
            return None
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    return value


def build(cls: type, data: dict[str, Any]) -> Any:
    """An instance of the kio dataclass ``cls`` from a neutral dict (nested dicts and lists welcome).

    Keys that ``cls`` lacks are ignored; fields missing from ``data`` get their default or a zero value.
    """
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name in data:
            value = data[f.name]
        elif f.has_default:
            continue
        elif f.optional:
            value = None
        elif f.is_tuple:
            value = ()
        elif f.nested is not None:
            value = {}
        else:
            value = _ZERO.get(f.kafka_type or "", 0)
        if f.nested is not None and value is not None:
            if f.is_tuple:
                value = tuple(v if dataclasses.is_dataclass(v) else build(f.nested, v) for v in value)
            elif not dataclasses.is_dataclass(value):
                value = build(f.nested, value)
        elif f.is_tuple and value is not None:
            value = tuple(_convert(f.kafka_type, v) for v in value)
        elif value is not None:
            value = _convert(f.kafka_type, value)
        kwargs[f.name] = value
    return cls(**kwargs)


def ms(value: Any) -> int:
    """Milliseconds of a kio timedelta/datetime field (ints pass through; None is -1)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
