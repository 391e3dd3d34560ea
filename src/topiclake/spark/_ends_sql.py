"""The SQL of the ``partition_offsets`` view: both ends of every partition's log, exact after retention.

A topic table's rows give the ends of a partition that still has records (``min(offset)``,
``max(offset) + 1``). A partition whose records were all removed has no row to take them from; its end
is the high watermark, a Delta ``txn`` action SQL cannot read. Two lower bounds of the ends fill in:
the ends recorded in ``_system/partition_offsets`` by whatever removed records
(:mod:`topiclake.platform.log.partition_offsets`), and the high watermarks read with delta-rs when the view
was (re)created. Offsets only grow, so a lower bound stays one: the log start is the rows' smallest
offset, or the largest known start when no row is left, and the end is the largest end known.
"""

from __future__ import annotations

from topiclake.spark.catalog_sql import literal

#: Name of the view in the topics' database.
ENDS_VIEW = "partition_offsets"
#: Name of the view of every recorded end (the topics' own time travel, docs/sql.md).
HISTORY_VIEW = "partition_offsets_history"

_EMPTY = (
    "SELECT CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS partition, "
    "CAST(NULL AS BIGINT) AS lo, CAST(NULL AS BIGINT) AS hi WHERE false"
)


def ends_view_sql(
    registered: dict[str, str],
    recorded: str | None,
    topic_ids: dict[str, str],
    known: dict[tuple[str, int], tuple[int, int]] | None = None,
) -> str:
    """The body of the ``partition_offsets`` view.

    Args:
        registered: Topic -> qualified table name, for every registered topic.
        recorded: A table expression of ``_system/partition_offsets`` (``delta.`<uri>```), or None when
            nothing was recorded yet.
        topic_ids: Topic -> its current ``topic_id`` (recorded rows of a deleted namesake are ignored).
        known: (topic, partition) -> (log start, end) read from the tables now: lower bounds baked into
            the view.
    """
    live = [
        f"SELECT {literal(topic)} AS topic, partition, min(offset) AS lo, max(offset) + 1 AS hi "
        f"FROM {table} GROUP BY partition"
        for topic, table in sorted(registered.items())
    ] or [_EMPTY]
    bounds: list[str] = []
    wanted = _wanted(registered, topic_ids)
    if recorded is not None and wanted:
        bounds.append(
            "SELECT topic, partition, log_start_offset AS lo, end_offset AS hi "
            f"FROM {recorded} WHERE {' OR '.join(wanted)}"
        )
    values = [
        f"({literal(t)}, {int(p)}, {int(lo)}L, {int(hi)}L)"
        for (t, p), (lo, hi) in sorted((known or {}).items())
        if t in registered
    ]
    if values:
        bounds.append(f"SELECT * FROM VALUES {', '.join(values)} AS known(topic, partition, lo, hi)")
    marked = (
        "SELECT topic, partition, max(lo) AS lo, max(hi) AS hi FROM (\n    "
        + "\n    UNION ALL ".join(bounds)
        + "\n  ) GROUP BY topic, partition"
        if bounds
        else _EMPTY
    )
    union = "\n  UNION ALL ".join(live)
    return (
        f"WITH live AS (\n  {union}\n),\nmarked AS (\n  {marked}\n)\n"
        "SELECT coalesce(l.topic, m.topic) AS topic, coalesce(l.partition, m.partition) AS partition,\n"
        "       coalesce(l.lo, m.lo) AS log_start_offset, greatest(l.hi, m.hi) AS end_offset\n"
        "FROM live l FULL OUTER JOIN marked m ON l.topic = m.topic AND l.partition = m.partition"
    )


def _wanted(registered: dict[str, str], topic_ids: dict[str, str]) -> list[str]:
    return [
        f"(topic = {literal(t)} AND topic_id = {literal(topic_ids[t])})"
        for t in sorted(registered)
        if t in topic_ids
    ]


def history_view_sql(registered: dict[str, str], recorded: str, topic_ids: dict[str, str]) -> str:
    """The body of ``partition_offsets_history``: every recorded end of the registered topics."""
    wanted = _wanted(registered, topic_ids) or ["false"]
    return (
        "SELECT topic, partition, log_start_offset, end_offset, recorded_at, recorded_by\n"
        f"FROM {recorded}\nWHERE {' OR '.join(wanted)}"
    )
