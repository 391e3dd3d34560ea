"""Protobuf messages decoded in plain Spark SQL: a message's descriptor compiled into one SQL expression.

Spark's own ``from_protobuf`` needs the external spark-protobuf module on the classpath (pyspark does not
ship it; Databricks does), and a typed view is a persisted SQL view, which cannot call a Python UDF. So the
view decodes with SQL that this module writes for each schema version from its descriptor, with built-in
functions only (higher-order functions over the bytes), and runs on any Spark 3.4+ and Databricks SQL:

- the payload is split into tokens ``(n, w, v, s)``: field number, wire type, the varint or fixed value,
  and the bytes of a length-delimited field;
- each field of the message picks its tokens by number (the last one for a singular field, all of them for a
  repeated one, packed or not) and turns them into a column of Spark's type for it.

Types: int32/sint32/sfixed32 INT; int64/sint64/sfixed64 BIGINT; uint32/fixed32 BIGINT; uint64/fixed64
DECIMAL(20,0); float FLOAT; double DOUBLE; bool BOOLEAN; string STRING; bytes BINARY; enums STRING (the
value's name); messages STRUCT; repeated ARRAY; maps MAP; ``google.protobuf.Timestamp`` TIMESTAMP; the
wrappers (``google.protobuf.Int32Value`` ...) their scalar, NULL when unset. A field with presence (a message,
a oneof member, a proto3 ``optional`` or proto2 field) is NULL when unset; a proto3 scalar without presence
shows its default (0, '', false, the first enum value), as protobuf reads it. A field whose message type
encloses it (a recursive type) is BINARY: the raw message. Fields of messages without fields are left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

__all__ = ["MessageSql", "message_sql"]

_TOKENS = "ARRAY<STRUCT<n: INT, w: INT, v: BIGINT, s: BINARY>>"
_T = FieldDescriptor
_VARINT_TYPES = {
    _T.TYPE_INT32: "INT",
    _T.TYPE_INT64: "BIGINT",
    _T.TYPE_UINT32: "BIGINT",
    _T.TYPE_UINT64: "DECIMAL(20,0)",
    _T.TYPE_SINT32: "INT",
    _T.TYPE_SINT64: "BIGINT",
    _T.TYPE_BOOL: "BOOLEAN",
    _T.TYPE_ENUM: "STRING",
}
_FIXED_TYPES = {
    _T.TYPE_FIXED32: ("BIGINT", 4),
    _T.TYPE_SFIXED32: ("INT", 4),
    _T.TYPE_FLOAT: ("FLOAT", 4),
    _T.TYPE_FIXED64: ("DECIMAL(20,0)", 8),
    _T.TYPE_SFIXED64: ("BIGINT", 8),
    _T.TYPE_DOUBLE: ("DOUBLE", 8),
}
_WRAPPERS = {
    f"google.protobuf.{n}"
    for n in (
        "DoubleValue",
        "FloatValue",
        "Int64Value",
        "UInt64Value",
        "Int32Value",
        "UInt32Value",
        "BoolValue",
        "StringValue",
        "BytesValue",
    )
}
_TIMESTAMP = "google.protobuf.Timestamp"


@dataclass(frozen=True)
class MessageSql:
    """A message's decoding: ``fields`` are ``(name, Spark SQL type)``; :meth:`expr` gives the STRUCT."""

    fields: list[tuple[str, str]]
    _template: str

    def expr(self, binary: str) -> str:
        """The expression decoding the serialized message ``binary`` (a SQL expression) into a STRUCT of
        :attr:`fields` (NULL for NULL)."""
        return self._template.replace("\x00B\x00", binary)


def message_sql(descriptor: Any) -> MessageSql | None:
    """The decoding of a message (a ``google.protobuf`` ``Descriptor``), or None for one without fields."""
    gen = _Gen()
    decoded = gen.message(descriptor, "\x00B\x00", ())
    if decoded is None:
        return None
    expr, type_ = decoded
    fields = gen.top_fields
    return MessageSql(fields, expr) if type_.startswith("STRUCT") else None


def _dot(s: str) -> str:
    return f"`{s.replace('`', '``')}`"


def _lit(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Gen:
    def __init__(self) -> None:
        self._names: Iterator[int] = itertools.count()
        self.top_fields: list[tuple[str, str]] = []

    def var(self) -> str:
        return f"_pb{next(self._names)}"

    def bind(self, value: str, body: Any) -> str:
        """``body(v)`` with ``value`` computed once (a one-element array's transform)."""
        v = self.var()
        return f"transform(array({value}), {v} -> {body(v)})[0]"

    # ------------------------------------------------------------------------------- wire format

    def varint(self, bs: str, q: str) -> str:
        """STRUCT(v BIGINT, l INT) of the varint at 0-based position ``q`` of the byte array ``bs``."""
        c, k = self.var(), self.var()
        byte = f"get({bs}, {q} + {k})"
        return (
            f"aggregate(sequence(0, 9), named_struct('v', CAST(0 AS BIGINT), 'l', 0, 'd', false), "
            f"({c}, {k}) -> IF({c}.d, {c}, named_struct('v', {c}.v | shiftleft(CAST({byte} & 127 AS BIGINT), "
            f"7 * {k}), 'l', {k} + 1, 'd', {byte} < 128)))"
        )

    def little_endian(self, bs: str, q: str, size: int) -> str:
        c, k = self.var(), self.var()
        return (
            f"aggregate(sequence(0, {size - 1}), CAST(0 AS BIGINT), ({c}, {k}) -> "
            f"{c} | shiftleft(CAST(get({bs}, {q} + {k}) AS BIGINT), 8 * {k}))"
        )

    def bytes_of(self, b: str) -> str:
        """ARRAY<INT> of the bytes of the BINARY ``b``."""
        h, i = self.var(), self.var()
        return (
            f"IF(length({b}) = 0, CAST(array() AS ARRAY<INT>), transform(array(hex({b})), {h} -> "
            f"transform(sequence(0, length({h}) div 2 - 1), {i} -> "
            f"CAST(conv(substring({h}, 2 * {i} + 1, 2), 16, 10) AS INT)))[0])"
        )

    def tokens(self, b: str) -> str:
        """The tokens ``ARRAY<STRUCT<n, w, v, s>>`` of the serialized message ``b`` (a bound variable)."""

        def parse(bs: str) -> str:
            a, i = self.var(), self.var()

            def token(g: str) -> str:
                q = f"{a}.p + {g}.l"
                n = f"try_cast(shiftright({g}.v, 3) AS INT)"

                def clamped(r: str) -> str:  # a corrupt length never runs past the message
                    return f"greatest(0, least(coalesce(try_cast({r}.v AS INT), size({bs})), size({bs})))"

                def tok(w: int, v: str, s: str, end: str) -> str:
                    item = f"named_struct('n', {n}, 'w', {w}, 'v', {v}, 's', {s})"
                    return f"named_struct('p', {end}, 't', concat({a}.t, array({item})))"

                null = "CAST(NULL AS BINARY)"
                length = self.bind(
                    self.varint(bs, q),
                    lambda r: tok(
                        2,
                        f"{r}.v",
                        f"substring({b}, {q} + {r}.l + 1, {clamped(r)})",
                        f"{q} + {r}.l + {clamped(r)}",
                    ),
                )
                varint = self.bind(self.varint(bs, q), lambda r: tok(0, f"{r}.v", null, f"{q} + {r}.l"))
                return (
                    f"CASE {g}.v & 7 "
                    f"WHEN 0 THEN {varint} "
                    f"WHEN 1 THEN {tok(1, self.little_endian(bs, q, 8), null, f'{q} + 8')} "
                    f"WHEN 5 THEN {tok(5, self.little_endian(bs, q, 4), null, f'{q} + 4')} "
                    f"WHEN 2 THEN {length} "
                    f"ELSE named_struct('p', size({bs}), 't', {a}.t) END"
                )

            step = self.bind(self.varint(bs, f"{a}.p"), token)
            return (
                f"aggregate(sequence(1, greatest(size({bs}), 1)), named_struct('p', 0, 't', "
                f"CAST(array() AS {_TOKENS})), ({a}, {i}) -> IF({a}.p >= size({bs}), {a}, {step}), "
                f"{a} -> {a}.t)"
            )

        return self.bind(self.bytes_of(b), parse)

    def packed(self, s: str, field: Any) -> str:
        """ARRAY<BIGINT> of the values packed in the bytes ``s`` of a repeated numeric field."""
        fixed = _FIXED_TYPES.get(field.type)
        if fixed is not None:
            size = fixed[1]

            def fixed_values(bs: str) -> str:
                j = self.var()
                le = self.little_endian(bs, f"{j} * {size}", size)
                return f"transform(sequence(0, size({bs}) div {size} - 1), {j} -> {le})"

            return (
                f"IF(length({s}) < {size}, CAST(array() AS ARRAY<BIGINT>), "
                f"{self.bind(self.bytes_of(s), fixed_values)})"
            )

        def varints(bs: str) -> str:
            a, i = self.var(), self.var()
            step = self.bind(
                self.varint(bs, f"{a}.p"),
                lambda r: f"named_struct('p', {a}.p + {r}.l, 'x', concat({a}.x, array({r}.v)))",
            )
            return (
                f"aggregate(sequence(1, greatest(size({bs}), 1)), named_struct('p', 0, 'x', "
                f"CAST(array() AS ARRAY<BIGINT>)), ({a}, {i}) -> IF({a}.p >= size({bs}), {a}, {step}), "
                f"{a} -> {a}.x)"
            )

        return f"IF(length({s}) = 0, CAST(array() AS ARRAY<BIGINT>), {self.bind(self.bytes_of(s), varints)})"

    # ---------------------------------------------------------------------------------- values

    def scalar(self, field: Any, v: str, s: str) -> tuple[str, str]:
        """``(expression, type)`` of one value of a scalar field from its token's ``v`` or ``s``."""
        t = field.type
        if t == _T.TYPE_STRING:
            return f"CAST({s} AS STRING)", "STRING"
        if t == _T.TYPE_BYTES:
            return s, "BINARY"
        if t in (_T.TYPE_INT32, _T.TYPE_INT64, _T.TYPE_SFIXED64):
            return (f"try_cast({v} AS INT)" if t == _T.TYPE_INT32 else v), _VARINT_TYPES.get(t, "BIGINT")
        if t in (_T.TYPE_UINT32, _T.TYPE_FIXED32):
            return f"({v} & 4294967295)", "BIGINT"
        if t in (_T.TYPE_UINT64, _T.TYPE_FIXED64):
            return (
                f"CAST(IF({v} < 0, CAST({v} AS DECIMAL(20,0)) + 18446744073709551616, {v}) AS DECIMAL(20,0))",
                "DECIMAL(20,0)",
            )
        if t in (_T.TYPE_SINT32, _T.TYPE_SINT64):
            zz = f"(shiftrightunsigned({v}, 1) ^ -({v} & 1))"
            return (f"try_cast({zz} AS INT)", "INT") if t == _T.TYPE_SINT32 else (zz, "BIGINT")
        if t == _T.TYPE_BOOL:
            return f"({v} <> 0)", "BOOLEAN"
        if t == _T.TYPE_ENUM:
            names = " ".join(f"WHEN {e.number} THEN {_lit(e.name)}" for e in field.enum_type.values)
            return f"CASE {v} {names} ELSE CAST({v} AS STRING) END", "STRING"
        if t == _T.TYPE_SFIXED32:
            return f"CAST(IF({v} >= 2147483648, {v} - 4294967296, {v}) AS INT)", "INT"
        if t == _T.TYPE_FLOAT:
            return f"CAST({_ieee(v, 8, 23)} AS FLOAT)", "FLOAT"
        if t == _T.TYPE_DOUBLE:
            return _ieee(v, 11, 52), "DOUBLE"
        raise ValueError(f"unsupported protobuf field type {t}")

    def default(self, field: Any) -> str:
        t = field.type
        if t == _T.TYPE_STRING:
            return "''"
        if t == _T.TYPE_BYTES:
            return "X''"
        if t == _T.TYPE_BOOL:
            return "false"
        if t == _T.TYPE_ENUM:
            return _lit(field.enum_type.values[0].name)
        _expr, type_ = self.scalar(field, "CAST(0 AS BIGINT)", "X''")
        return f"CAST(0 AS {type_})"

    def message(self, desc: Any, b: str, seen: tuple[str, ...]) -> tuple[str, str] | None:
        """``(expression, type)`` of a message from its serialized bytes ``b``; None when it has no fields."""
        if desc.full_name in seen:
            return b, "BINARY"
        if desc.full_name == _TIMESTAMP:

            def ts(tk: str) -> str:
                x = self.var()
                secs = f"coalesce(try_element_at(filter({tk}, {x} -> {x}.n = 1), -1).v, 0)"
                nanos = f"coalesce(try_element_at(filter({tk}, {x} -> {x}.n = 2), -1).v, 0)"
                return f"timestamp_micros(try_add(try_multiply({secs}, 1000000), {nanos} div 1000))"

            return self.bind(
                b, lambda bb: f"IF({bb} IS NULL, NULL, {self.bind(self.tokens(bb), ts)})"
            ), "TIMESTAMP"
        if desc.full_name in _WRAPPERS:
            value = desc.fields_by_number[1]

            def wrapped(tk: str) -> str:
                decoded = self.field(value, tk, (*seen, desc.full_name), implicit=True)
                assert decoded is not None  # a scalar
                return decoded[0]

            _expr, type_ = self.scalar(value, "CAST(0 AS BIGINT)", "X''")
            body = self.bind(b, lambda bb: f"IF({bb} IS NULL, NULL, {self.bind(self.tokens(bb), wrapped)})")
            return body, type_
        inner = (*seen, desc.full_name)
        out: list[tuple[str, str, str]] = []

        def build(tk: str) -> str:
            for f in desc.fields:
                decoded = self.field(f, tk, inner, implicit=not f.has_presence)
                if decoded is not None:
                    out.append((f.name, *decoded))
            return "named_struct(" + ", ".join(f"{_lit(n)}, {e}" for n, e, _t in out) + ")"

        body = self.bind(b, lambda bb: f"IF({bb} IS NULL, NULL, {self.bind(self.tokens(bb), build)})")
        if not out:
            return None
        if not seen:
            self.top_fields = [(n, t) for n, _e, t in out]
        return body, "STRUCT<" + ", ".join(f"{_dot(n)}: {t}" for n, _e, t in out) + ">"

    def field(self, f: Any, tk: str, seen: tuple[str, ...], implicit: bool) -> tuple[str, str] | None:
        """``(expression, type)`` of one field from the message's tokens ``tk``."""
        x = self.var()
        mine = f"filter({tk}, {x} -> {x}.n = {f.number})"
        if f.type in (_T.TYPE_MESSAGE, _T.TYPE_GROUP):
            entry = f.message_type
            if f.is_repeated and entry.GetOptions().map_entry:
                kf, vf = entry.fields_by_number[1], entry.fields_by_number[2]
                y = self.var()
                types: list[str] = []

                def pair(tk2: str) -> str:
                    key = self.field(kf, tk2, seen, implicit=True)
                    value = self.field(vf, tk2, seen, implicit=vf.type != _T.TYPE_MESSAGE)
                    if key is None or value is None:
                        return ""
                    types.extend((key[1], value[1]))
                    return f"named_struct('key', {key[0]}, 'value', {value[0]})"

                entries = f"transform({mine}, {y} -> {self.bind(self.tokens(f'{y}.s'), pair)})"
                if not types:
                    return None
                # a key may repeat on the wire (the last one wins); map_from_entries refuses duplicates
                e, i, z = self.var(), self.var(), self.var()
                later = f"transform(slice({{es}}, {i} + 2, size({{es}})), {z} -> {z}.key)"
                last = self.bind(
                    entries,
                    lambda es: (
                        f"filter({es}, ({e}, {i}) -> NOT array_contains({later.format(es=es)}, {e}.key))"
                    ),
                )
                return f"map_from_entries({last})", f"MAP<{types[0]}, {types[1]}>"
            if f.is_repeated:
                y = self.var()
                probe = self.message(f.message_type, f"{y}.s", seen)
                if probe is None:
                    return None
                return f"transform({mine}, {y} -> {probe[0]})", f"ARRAY<{probe[1]}>"
            last = f"try_element_at({mine}, -1)"
            probe = self.message(f.message_type, f"{last}.s", seen)
            return probe
        if f.is_repeated:
            y, z = self.var(), self.var()
            expr_y, type_ = self.scalar(f, f"{y}.v", f"{y}.s")
            if f.type in (_T.TYPE_STRING, _T.TYPE_BYTES):
                return f"transform({mine}, {y} -> {expr_y})", f"ARRAY<{type_}>"
            expr_z, _t = self.scalar(f, z, "NULL")
            one = f"transform({self.packed(f'{y}.s', f)}, {z} -> {expr_z})"
            return (
                f"flatten(transform({mine}, {y} -> IF({y}.w = 2, {one}, array({expr_y}))))",
                f"ARRAY<{type_}>",
            )
        type_ = self.scalar(f, "CAST(0 AS BIGINT)", "X''")[1]
        value = self.bind(f"try_element_at({mine}, -1)", lambda v: self.scalar(f, f"{v}.v", f"{v}.s")[0])
        if implicit:
            value = f"coalesce({value}, {self.default(f)})"
        return value, type_


def _ieee(v: str, exp_bits: int, mant_bits: int) -> str:
    """The IEEE 754 number whose bits are the BIGINT ``v`` (float: 8/23, double: 11/52), as DOUBLE."""
    bias = (1 << (exp_bits - 1)) - 1
    e = f"(shiftrightunsigned({v}, {mant_bits}) & {(1 << exp_bits) - 1})"
    m = f"({v} & {(1 << mant_bits) - 1})"
    sign = (
        f"IF(({v} & {1 << (exp_bits + mant_bits)}) <> 0, -1.0D, 1.0D)"
        if exp_bits == 8
        else f"IF({v} < 0, -1.0D, 1.0D)"
    )
    return (
        f"CASE WHEN {e} = {(1 << exp_bits) - 1} THEN IF({m} = 0, {sign} * CAST('Infinity' AS DOUBLE), "
        f"CAST('NaN' AS DOUBLE)) WHEN {e} = 0 THEN {sign} * {m} * pow(2, {1 - bias - mant_bits}) "
        f"ELSE {sign} * (1 + {m} / {float(1 << mant_bits)}D) * pow(2, {e} - {bias}) END"
    )
