"""Pure helpers of :mod:`topiclake.spark.catalog`: table names, SQL quoting, the lag view's SQL."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from urllib.parse import unquote, urlparse

_NOT_IN_NAME = re.compile(r"[^a-z0-9_]")


def table_name(topic: str) -> str:
    """The catalog name of a topic's table.

    Spark's session catalog (in-memory or Hive) accepts only letters, digits and ``_`` in table names and
    compares them case-insensitively, while Kafka topic names may hold ``.`` and ``-`` and are
    case-sensitive. The table name is the topic name in lower case with every other character as ``_``:
    ``orders.v1`` and ``Orders-V1`` both become ``orders_v1`` (collisions:
    :func:`topiclake.spark.catalog.register_tables`).

    Args:
        topic: A valid topic name.
    """
    return _NOT_IN_NAME.sub("_", topic.lower())


def ident(*parts: str) -> str:
    """A backquoted, dot-joined SQL identifier (``a``.``b``)."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def literal(text: str) -> str:
    """A single-quoted Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def same_location(spark_location: str | None, uri: str) -> bool:
    """Whether the location the catalog shows (``file:/a/b``, ``s3a://x/y/``) is ``uri``."""

    def norm(text: str) -> str:
        parsed = urlparse(text)
        if parsed.scheme in ("", "file"):
            return unquote(parsed.path).rstrip("/")
        return unquote(text).rstrip("/")

    return spark_location is not None and norm(spark_location) == norm(uri)


def lag_view_sql(registered: dict[str, str], offsets: str | None, ends_view: str | None = None) -> str:
    """The body of ``consumer_lag`` over the registered topic tables and offsets table (and the ends of
    the partitions from ``ends_view``, the ``partition_offsets`` view, when given)."""
    if offsets is None:
        committed = (
            "SELECT CAST(NULL AS STRING) AS `group`, CAST(NULL AS STRING) AS topic, "
            "CAST(NULL AS INT) AS partition, CAST(NULL AS BIGINT) AS committed_offset, "
            "CAST(NULL AS TIMESTAMP) AS commit_timestamp WHERE false"
        )
    else:
        committed = (
            "SELECT `group`, topic, partition, max_by(committed_offset, commit_seq) AS committed_offset, "
            f"max_by(commit_timestamp, commit_seq) AS commit_timestamp FROM {offsets} "
            "GROUP BY `group`, topic, partition"
        )
    ends = [
        f"SELECT {literal(topic)} AS topic, partition, min(offset) AS log_start_offset, "
        f"max(offset) + 1 AS end_offset FROM {table} GROUP BY partition"
        for topic, table in sorted(registered.items())
    ] or [
        "SELECT CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS partition, "
        "CAST(NULL AS BIGINT) AS log_start_offset, CAST(NULL AS BIGINT) AS end_offset WHERE false"
    ]
    if ends_view is not None:
        ends = [f"SELECT topic, partition, log_start_offset, end_offset FROM {ends_view}"]
    topics = ", ".join(literal(t) for t in sorted(registered))
    where = f"c.topic IN ({topics})" if topics else "false"
    union = "\n  UNION ALL ".join(ends)
    return (
        f"WITH committed AS (\n  {committed}\n),\nends AS (\n  {union}\n)\n"
        "SELECT c.`group`, c.topic, c.partition, c.committed_offset, e.log_start_offset, e.end_offset,\n"
        "       greatest(coalesce(e.end_offset, c.committed_offset) - c.committed_offset, 0) AS lag,\n"
        "       c.commit_timestamp\n"
        "FROM committed c LEFT JOIN ends e ON e.topic = c.topic AND e.partition = c.partition\n"
        f"WHERE {where}"
    )


def assign_names(topics: Sequence[str], reserved: Collection[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Table name per topic, and why the others get none (collisions, reserved names)."""
    by_name: dict[str, list[str]] = {}
    for topic in topics:
        by_name.setdefault(table_name(topic), []).append(topic)
    names: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, claimants in by_name.items():
        if name in reserved:
            for t in claimants:
                skipped[t] = f"table name {name} is reserved for the platform's own table"
            continue
        # A topic whose name is already the table name keeps it; otherwise nobody does, so a query never
        # reads a topic the user did not mean.
        winner = name if name in claimants else (claimants[0] if len(claimants) == 1 else None)
        for t in claimants:
            if t == winner:
                names[t] = name
            else:
                others = ", ".join(sorted(c for c in claimants if c != t))
                skipped[t] = f"table name {name} collides with topic(s) {others}"
    return names, skipped


def error_summary(text: str, max_lines: int = 3) -> str:
    """The first line of an error message, continued while it breaks off mid-sentence (Delta wraps some)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    summary = lines[0] if lines else ""
    for line in lines[1:max_lines]:
        if not line or summary.endswith((".", "!", "?", ")", ":", ";")) or line.startswith(("==", "JVM")):
            break
        summary = f"{summary} {line}"
    return summary
