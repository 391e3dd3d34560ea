"""The columns of a typed view for a PROTOBUF subject: each version's message decoded in SQL.

Each record is decoded with the version its schema id names (``_protobuf_sql`` compiles that version's
message into SQL). The message is the file's main message: its first top-level message that no other
message of the file uses (so a file that declares its helper messages first still shows the message its
records are written as), or the first one when each is used. A record's message indexes must name it
(``[0]``: the byte ``00`` or ``02 00``; ``[i]``: ``02``, then ``2i``), else its fields are NULL.

A column has the type of the newest version that has the field; an older version's value is reshaped to it
(a nested message that gained a field gets it as NULL), so a field added later is a nullable column that is
NULL for older records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from topiclake.schema_registry.errors import InvalidSchema
from topiclake.schema_registry.formats import parse
from topiclake.schema_registry.protobuf import ProtobufSchema
from topiclake.spark._protobuf_sql import message_sql
from topiclake.spark.catalog_sql import ident, literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from topiclake.spark._typed_version import TypedVersion

__all__ = ["protobuf_columns"]

logger = logging.getLogger(__name__)


def _payload(column: str, index: int) -> str:
    """The message bytes of a framed record whose message indexes are ``[index]`` (a top-level message),
    else NULL. Indexes are zig-zag varints: a count (1: ``02``) and the index; ``[0]`` is also ``00``."""
    if index > 63:  # its zig-zag varint takes two bytes; such files are not worth the SQL
        return "CAST(NULL AS BINARY)"
    framed = f"WHEN substring({column}, 6, 2) = X'02{2 * index:02X}' THEN substring({column}, 8)"
    short = f"WHEN substring({column}, 6, 1) = X'00' THEN substring({column}, 7) " if index == 0 else ""
    return f"CASE {short}{framed} END"


def _reshape(expr: str, src: Any, dst: Any, counter: list[int]) -> str:
    """``expr`` of Spark type ``src`` as type ``dst``: struct fields matched by name (missing ones NULL),
    arrays and map values element by element, anything else ``try_cast``."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if src == dst:
        return expr
    counter[0] += 1
    v = f"_rs{counter[0]}"
    if isinstance(src, StructType) and isinstance(dst, StructType):
        have = {f.name: f.dataType for f in src.fields}
        parts = [
            f"{literal(f.name)}, "
            + (
                _reshape(f"{expr}.{ident(f.name)}", have[f.name], f.dataType, counter)
                if f.name in have
                else f"CAST(NULL AS {f.dataType.simpleString()})"
            )
            for f in dst.fields
        ]
        return f"IF({expr} IS NULL, NULL, named_struct({', '.join(parts)}))"
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        return f"transform({expr}, {v} -> {_reshape(v, src.elementType, dst.elementType, counter)})"
    if isinstance(src, MapType) and isinstance(dst, MapType) and src.keyType == dst.keyType:
        inner = _reshape(f"{v}v", src.valueType, dst.valueType, counter)
        return f"transform_values({expr}, ({v}k, {v}v) -> {inner})"
    return f"try_cast({expr} AS {dst.simpleString()})"


def protobuf_columns(
    spark: SparkSession, column: str, tag: str, sid: str, versions: Sequence[TypedVersion]
) -> tuple[list[str], list[tuple[str | None, str]]]:
    """The decoding expressions (one per version, named ``_<tag>r<i>``) and ``(field, expression)`` of
    every column, for ``column`` (``key`` or ``value``) whose schema id is in the column ``sid``."""
    decoding: list[str] = []
    per_version: list[tuple[int, dict[str, Any]]] = []
    for i, v in enumerate(versions):
        try:
            parsed = parse("PROTOBUF", v.schema, v.references)
        except InvalidSchema as exc:
            logger.warning("schema id %d does not parse; its records show NULL: %s", v.schema_id, exc)
            continue
        assert isinstance(parsed, ProtobufSchema)
        index, name = parsed.root_message()
        decoded = message_sql(parsed.files.pool.FindMessageTypeByName(name)) if name else None
        if decoded is None:
            continue
        ddl = ", ".join(f"{ident(n)}: {t}" for n, t in decoded.fields)
        row: Any = spark.sql(f"SELECT CAST(NULL AS STRUCT<{ddl}>) AS r").schema["r"].dataType
        decoding.append(
            f"CASE WHEN {sid} = {v.schema_id} THEN {decoded.expr(_payload(column, index))} END AS _{tag}r{i}"
        )
        per_version.append((i, {f.name: f.dataType for f in row.fields}))
    newest: dict[str, Any] = {}
    for _i, fields in reversed(per_version):
        for name, type_ in fields.items():
            newest.setdefault(name, type_)
    counter = [0]
    out: list[tuple[str | None, str]] = []
    for name, type_ in newest.items():
        parts = [
            _reshape(f"_{tag}r{i}.{ident(name)}", fields[name], type_, counter)
            for i, fields in per_version
            if name in fields
        ]
        out.append((name, parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"))
    return decoding, out
