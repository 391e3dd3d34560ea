"""Typed views of topics whose values have registered schemas: ``topiclake.<table>_typed``.

For a topic whose value subject (TopicNameStrategy: ``<topic>-value``) has AVRO or JSON versions, the view
holds the topic table's ``partition``, ``offset``, ``timestamp``, ``timestampType``, ``headers`` and ``key``,
``value_schema_id``, and one column per field of the value. It is a plain SQL view over the topic's Delta
table (no second copy of the data) that decodes each record with the schema it was written with, read from
Confluent's wire format (magic byte 0, 4-byte schema id):

- AVRO: ``from_avro`` (Spark's spark-avro, resolved with the Delta jars) with the writer's schema, one
  ``CASE`` branch per schema id; a field is typed as in the newest version that has it, so a field added
  later is a nullable column that is NULL for older records, and a removed field stays a column (NULL for
  newer records).
- JSON: ``from_json`` with one struct built from the union of the versions' properties.

A record without the wire format, or with a schema id of another subject, shows NULL fields. A field whose
name is one of the view's own columns gets a ``value_`` prefix. Schemas that reference other schemas and
PROTOBUF subjects get no view (see docs/schemas.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topiclake.schema_registry.store import RegistryState
from topiclake.schemas.schema_registry import SCHEMAS_TABLE
from topiclake.spark._catalog_sql import ident, literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SUFFIX", "TypedVersion", "register_typed_views", "subject_versions", "typed_view_sql"]

logger = logging.getLogger(__name__)

#: Suffix of a typed view's name.
SUFFIX = "_typed"

_BASE_COLUMNS = ("partition", "offset", "timestamp", "timestampType", "headers", "key")
_SID = "CAST(conv(hex(substring(value, 2, 4)), 16, 10) AS INT)"
_FRAMED = "(value IS NOT NULL AND length(value) >= 5 AND substring(value, 1, 1) = X'00')"


@dataclass(frozen=True)
class TypedVersion:
    """One version of a value subject: its schema id, type and text."""

    version: int
    schema_id: int
    schema_type: str
    schema: str


def subject_versions(state: RegistryState, subject: str) -> list[TypedVersion]:
    """Every version of ``subject`` that records may have been written with (soft-deleted ones too),
    oldest first; empty when a version references other schemas (no view for those)."""
    out: list[TypedVersion] = []
    for entry in sorted(state.subjects.get(subject, {}).values(), key=lambda v: v.version):
        stored = state.schemas[entry.schema_id]
        if stored.references:
            return []
        out.append(TypedVersion(entry.version, stored.schema_id, stored.schema_type, stored.schema))
    return out


def _column(name: str) -> str:
    return f"value_{name}" if name in _BASE_COLUMNS or name == "value_schema_id" else name


def _avro_fields(spark: SparkSession, schema: str) -> list[tuple[str, str]]:
    """``(field, Spark SQL type)`` of an Avro record schema, as ``from_avro`` decodes it."""
    row_type = spark.sql(f"SELECT from_avro(CAST(NULL AS BINARY), {literal(schema)}) AS r").schema["r"]
    data_type: Any = row_type.dataType
    if not hasattr(data_type, "fields"):
        return [("value", data_type.simpleString())]
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


def _union(per_version: Sequence[Sequence[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Fields of the newest version first (its types), then fields only older versions have."""
    seen: dict[str, str] = {}
    for fields in reversed(per_version):
        for name, type_ in fields:
            seen.setdefault(name, type_)
    return list(seen.items())


def typed_view_sql(spark: SparkSession, table: str, versions: Sequence[TypedVersion]) -> str | None:
    """The ``SELECT`` of a typed view over ``table`` (a qualified table name), or None when the versions
    cannot be typed (mixed or PROTOBUF schemas, or none)."""
    types = {v.schema_type for v in versions}
    base = ", ".join(ident(c) for c in _BASE_COLUMNS)
    if types == {"JSON"}:
        props = [
            list(json.loads(v.schema).get("properties", {}).items())
            if isinstance(json.loads(v.schema), dict)
            else []
            for v in versions
        ]
        fields = [(name, _json_type(sub)) for name, sub in _union([[(k, s) for k, s in p] for p in props])]
        if not fields:
            return None
        ddl = ", ".join(f"{ident(name)} {type_}" for name, type_ in fields)
        ids = ", ".join(str(v.schema_id) for v in versions)
        decoded = (
            f"CASE WHEN {_FRAMED} AND {_SID} IN ({ids}) THEN "
            f"from_json(CAST(substring(value, 6) AS STRING), {literal(ddl)}) END"
        )
        columns = ", ".join(f"_r.{ident(name)} AS {ident(_column(name))}" for name, _ in fields)
        return (
            f"SELECT {base}, _sid AS value_schema_id, {columns}\n"
            f"FROM (SELECT *, CASE WHEN {_FRAMED} THEN {_SID} END AS _sid, {decoded} AS _r FROM {table})"
        )
    if types != {"AVRO"}:
        return None
    per_version = [_avro_fields(spark, v.schema) for v in versions]
    fields = _union(per_version)
    branches = []
    for i, v in enumerate(versions):
        branches.append(
            f"CASE WHEN _sid = {v.schema_id} THEN from_avro(substring(value, 6), {literal(v.schema)}, "
            f"map('mode', 'PERMISSIVE')) END AS _r{i}"
        )
    selected: list[str] = []
    for name, type_ in fields:
        parts = [
            f"CAST(_r{i}.{ident(name)} AS {type_})"
            for i, own in enumerate(per_version)
            if any(n == name for n, _ in own)
        ]
        expr = parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"
        selected.append(f"{expr} AS {ident(_column(name))}")
    framed = f"SELECT *, CASE WHEN {_FRAMED} THEN {_SID} END AS _sid FROM {table}"
    return (
        f"SELECT {base}, _sid AS value_schema_id, {', '.join(selected)}\n"
        f"FROM (SELECT *, {', '.join(branches)} FROM ({framed}))"
    )


def _registry_state(spark: SparkSession, root: str) -> RegistryState | None:
    from topiclake.spark.catalog import _read_delta

    df = _read_delta(spark, f"{root}/_system/{SCHEMAS_TABLE}")
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
            select = typed_view_sql(spark, f"{db}.{ident(name)}", versions)
            if select is None:
                skipped[topic] = "its value schemas are not all AVRO or all JSON"
                continue
            spark.sql(f"CREATE OR REPLACE VIEW {db}.{ident(view)} AS\n{select}")
        except PySparkException as exc:
            skipped[topic] = f"cannot create {view}: {str(exc).splitlines()[0]}"
            continue
        views[topic] = view
        logger.info("typed view %s.%s over %d schema versions", db, view, len(versions))
    for topic, reason in skipped.items():
        logger.warning("topic %s has no typed view: %s", topic, reason)
    return views, skipped
