"""Typed views of topics whose values have registered schemas: ``topiclake.<table>_typed``.

For a topic whose value subject (TopicNameStrategy: ``<topic>-value``) has AVRO, JSON or PROTOBUF versions,
the view holds the topic table's ``partition``, ``offset``, ``timestamp``, ``timestampType``, ``headers``
and ``key``, ``value_schema_id``, and one column per field of the value. It is a plain SQL view over the
topic's Delta table (no second copy of the data) that decodes each record with the schema it was written
with, read from Confluent's wire format (magic byte 0, 4-byte schema id):

- AVRO: ``from_avro`` (Spark's spark-avro, resolved with the Delta jars) with the writer's schema, one
  ``CASE`` branch per schema id; a field is typed as in the newest version that has it, so a field added
  later is a nullable column that is NULL for older records, and a removed field stays a column (NULL for
  newer records); a value an older version's type cannot be cast to (a changed type, under NONE) is NULL
  (``try_cast``), never a failed query.
- JSON: ``from_json`` with one struct built from the union of the versions' properties.
- PROTOBUF: the file's first message, decoded by SQL compiled from each version's descriptor (imports and
  references resolved; see ``_protobuf_sql`` and ``_typed_protobuf``), one column per field.

When the key subject ``<topic>-key`` has AVRO, JSON or PROTOBUF versions too, ``key`` is decoded the same
way (a struct for a record schema) and ``key_schema_id`` is added; otherwise ``key`` stays binary. A record
without the wire format, or with a schema id of another subject, shows NULL fields. A field whose name is
one of the view's own columns gets a ``value_`` prefix. JSON schemas that reference other schemas get no
view (see docs/schemas.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topiclake.schema_registry.errors import InvalidSchema
from topiclake.schema_registry.rules import resolve
from topiclake.schema_registry.store import RegistryState
from topiclake.schemas.schema_registry import SCHEMAS_TABLE
from topiclake.spark._delta_read import read_delta
from topiclake.spark._typed_version import TypedVersion
from topiclake.spark.catalog_sql import ident, literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SUFFIX", "TypedVersion", "register_typed_views", "subject_versions", "typed_view_sql"]

logger = logging.getLogger(__name__)

#: Suffix of a typed view's name.
SUFFIX = "_typed"
#: Table property that marks a view as made here (so registering again may replace or drop it).
_MARK = "topiclake.typed_view"

_BASE_COLUMNS = ("partition", "offset", "timestamp", "timestampType", "headers", "key")


def subject_versions(state: RegistryState, subject: str) -> list[TypedVersion]:
    """Every version of ``subject`` that records may have been written with (soft-deleted ones too),
    oldest first. An Avro schema that references others is expanded into one self-contained schema (what
    ``from_avro`` needs), a Protobuf one keeps the files it references; a JSON one with references gives no
    versions (no view)."""
    out: list[TypedVersion] = []
    for entry in sorted(state.subjects.get(subject, {}).values(), key=lambda v: v.version):
        stored = state.schemas[entry.schema_id]
        text = stored.schema
        refs: tuple[tuple[str, str], ...] = ()
        if stored.references:
            if stored.schema_type not in ("AVRO", "PROTOBUF"):
                return []
            try:
                refs = tuple(resolve(state, stored.references, set()))
                if stored.schema_type == "AVRO":
                    text, refs = _expanded_avro(text, refs), ()
            except (InvalidSchema, ValueError, TypeError, KeyError) as exc:
                logger.warning(
                    "subject %s version %d: cannot expand its references: %s", subject, entry.version, exc
                )
                return []
        out.append(TypedVersion(entry.version, stored.schema_id, stored.schema_type, text, refs))
    return out


def _expanded_avro(text: str, references: Sequence[tuple[str, str]]) -> str:
    import fastavro

    named: dict[str, Any] = {}
    for _name, ref in references:
        fastavro.parse_schema(json.loads(ref), named_schemas=named)
    expanded = fastavro.parse_schema(json.loads(text), named_schemas=named, expand=True, _write_hint=False)
    return json.dumps(expanded)


def _column(name: str) -> str:
    taken = name in _BASE_COLUMNS or name in ("key_schema_id", "value_schema_id")
    return f"value_{name}" if taken else name


def _avro_fields(spark: SparkSession, schema: str) -> list[tuple[str | None, str]]:
    """``(field, Spark SQL type)`` of an Avro record schema, as ``from_avro`` decodes it (one field named
    None for a schema that is not a record)."""
    row_type = spark.sql(f"SELECT from_avro(CAST(NULL AS BINARY), {literal(schema)}) AS r").schema["r"]
    data_type: Any = row_type.dataType
    if not hasattr(data_type, "fields"):
        return [(None, data_type.simpleString())]
    return [(f.name, f.dataType.simpleString()) for f in data_type.fields]


def _json_type(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "STRING"
    t = schema.get("type")
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        t = rest[0] if len(rest) == 1 else None
    if t == "integer":
        return "BIGINT"
    if t == "number":
        return "DOUBLE"
    if t == "boolean":
        return "BOOLEAN"
    if t == "array":
        return f"ARRAY<{_json_type(schema.get('items'))}>"
    if t == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        inner = ", ".join(f"{ident(k)}: {_json_type(v)}" for k, v in schema["properties"].items())
        return f"STRUCT<{inner}>"
    return "STRING"


def _union(per_version: Sequence[Sequence[tuple[Any, Any]]]) -> list[tuple[Any, Any]]:
    """Fields of the newest version first (its types), then fields only older versions have."""
    seen: dict[Any, Any] = {}
    for fields in reversed(per_version):
        for name, type_ in fields:
            seen.setdefault(name, type_)
    return list(seen.items())


@dataclass(frozen=True)
class _Side:
    """How one column (``key`` or ``value``) is decoded: expressions of the two inner selects, and the
    decoded fields (name None: the whole decoded value, for a schema that is not a record)."""

    framing: str
    decoding: list[str]
    schema_id: str
    fields: list[tuple[str | None, str]]


def _side(spark: SparkSession, column: str, tag: str, versions: Sequence[TypedVersion]) -> _Side | None:
    types = {v.schema_type for v in versions}
    payload = f"substring({column}, 6)"
    sid = f"_{tag}sid"
    framed = (
        f"CASE WHEN {column} IS NOT NULL AND length({column}) >= 5 AND substring({column}, 1, 1) = X'00' "
        f"THEN CAST(conv(hex(substring({column}, 2, 4)), 16, 10) AS INT) END AS {sid}"
    )
    if types == {"JSON"}:
        docs = [json.loads(v.schema) for v in versions]
        props = [list(d.get("properties", {}).items()) if isinstance(d, dict) else [] for d in docs]
        fields = [(name, _json_type(sub)) for name, sub in _union(props)]
        if not fields:
            return None
        ddl = ", ".join(f"{ident(name)} {type_}" for name, type_ in fields)
        ids = ", ".join(str(v.schema_id) for v in versions)
        parsed = f"from_json(CAST({payload} AS STRING), {literal(ddl)})"
        decoding = [f"CASE WHEN {sid} IN ({ids}) THEN {parsed} END AS _{tag}r"]
        return _Side(framed, decoding, sid, [(name, f"_{tag}r.{ident(name)}") for name, _ in fields])
    if types == {"PROTOBUF"}:
        from topiclake.spark._typed_protobuf import protobuf_columns

        decoding, fields = protobuf_columns(spark, column, tag, sid, versions)
        return _Side(framed, decoding, sid, fields) if fields else None
    if types != {"AVRO"}:
        return None
    per_version = [_avro_fields(spark, v.schema) for v in versions]
    decoding = [
        f"CASE WHEN {sid} = {v.schema_id} THEN from_avro({payload}, {literal(v.schema)}, "
        f"map('mode', 'PERMISSIVE')) END AS _{tag}r{i}"
        for i, v in enumerate(versions)
    ]
    out: list[tuple[str | None, str]] = []
    for name, type_ in _union(per_version):
        parts = [
            f"try_cast(_{tag}r{i}{'' if name is None else '.' + ident(name)} AS {type_})"
            for i, own in enumerate(per_version)
            if any(n == name for n, _ in own)
        ]
        out.append((name, parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"))
    return _Side(framed, decoding, sid, out)


def typed_view_sql(
    spark: SparkSession,
    table: str,
    versions: Sequence[TypedVersion],
    key_versions: Sequence[TypedVersion] = (),
) -> str | None:
    """The ``SELECT`` of a typed view over ``table`` (a qualified table name), or None when the value's
    versions cannot be typed (mixed schema types, or none). A key with AVRO, JSON or PROTOBUF versions becomes
    a typed ``key`` column (a struct for a record schema) and ``key_schema_id``; else ``key`` stays binary."""
    value = _side(spark, "value", "v", versions)
    if value is None:
        return None
    key = _side(spark, "key", "k", key_versions) if key_versions else None
    sides = [s for s in (value, key) if s is not None]
    columns = [ident(c) for c in _BASE_COLUMNS if c != "key"]
    if key is None:
        columns.append("`key`")
    else:
        if len(key.fields) == 1 and key.fields[0][0] is None:
            columns.append(f"{key.fields[0][1]} AS `key`")
        else:
            pairs = ", ".join(f"{literal(str(n))}, {e}" for n, e in key.fields)
            columns.append(f"IF({key.schema_id} IS NULL, NULL, named_struct({pairs})) AS `key`")
        columns.append(f"{key.schema_id} AS key_schema_id")
    columns.append(f"{value.schema_id} AS value_schema_id")
    for name, expr in value.fields:
        columns.append(f"{expr} AS {ident(_column(name or 'value'))}")
    framing = ", ".join(s.framing for s in sides)
    decoding = ", ".join(d for s in sides for d in s.decoding)
    return f"SELECT {', '.join(columns)}\nFROM (SELECT *, {decoding} FROM (SELECT *, {framing} FROM {table}))"


def _registry_state(spark: SparkSession, root: str) -> RegistryState | None:
    df = read_delta(spark, f"{root}/_system/{SCHEMAS_TABLE}")
    if df is None:
        return None
    state = RegistryState()
    for row in sorted((r.asDict() for r in df.collect()), key=lambda r: r["seq"]):
        state.apply(row)
    return state


def register_typed_views(
    spark: SparkSession, root: str, db: str, tables: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Create or replace ``<table>_typed`` for every topic of ``tables`` (topic -> unqualified table name in
    ``db``) whose value subject has a schema.

    Returns:
        Topic -> view name created, and topic -> why it has none (only for topics with a schema).
    """
    from pyspark.errors import PySparkException

    state = _registry_state(spark, root)
    views: dict[str, str] = {}
    skipped: dict[str, str] = {}
    if state is None:
        _drop_stale(spark, db, set())
        return views, skipped
    taken = set(tables.values())
    for topic, name in sorted(tables.items()):
        versions = subject_versions(state, f"{topic}-value")
        if not versions:
            continue
        view = f"{name}{SUFFIX}"
        if view in taken:
            skipped[topic] = f"{view} is the table of another topic"
            continue
        try:
            key_versions = subject_versions(state, f"{topic}-key")
            select = typed_view_sql(spark, f"{db}.{ident(name)}", versions, key_versions)
            if select is None:
                skipped[topic] = "its value schemas are not all of one type (AVRO, JSON or PROTOBUF)"
                continue
            spark.sql(
                f"CREATE OR REPLACE VIEW {db}.{ident(view)} TBLPROPERTIES ({literal(_MARK)} = 'true') "
                f"AS\n{select}"
            )
        except PySparkException as exc:
            skipped[topic] = f"cannot create {view}: {str(exc).splitlines()[0]}"
            continue
        views[topic] = view
        logger.info("typed view %s.%s over %d schema versions", db, view, len(versions))
    for topic, reason in skipped.items():
        logger.warning("topic %s has no typed view: %s", topic, reason)
    _drop_stale(spark, db, set(views.values()))
    return views, skipped


def _drop_stale(spark: SparkSession, db: str, keep: set[str]) -> None:
    """Drop the typed views this module made (marked by a table property) that are no longer wanted: a
    deleted topic's, or one whose subject lost its schemas. Other views are never touched."""
    for row in spark.sql(f"SHOW VIEWS IN {db}").collect():
        name = str(row["viewName"])
        if row["isTemporary"] or not name.endswith(SUFFIX) or name in keep:
            continue
        qualified = f"{db}.{ident(name)}"
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {qualified}").collect()}
        if props.get(_MARK) == "true":
            spark.sql(f"DROP VIEW IF EXISTS {qualified}")
            logger.info("dropped typed view %s (its topic or schema is gone)", qualified)
