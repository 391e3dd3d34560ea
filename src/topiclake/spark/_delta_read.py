"""Reading a Delta table from Spark when it may not exist yet, and summing up Spark's errors.

Shared by :mod:`topiclake.spark.catalog` and :mod:`topiclake.spark.typed_views` (it lived in the first, which
made a cycle with the second). pyspark is imported inside the functions, as in those modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topiclake.errors import SqlError
from topiclake.spark.catalog_sql import error_summary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: What Spark says when a path holds no Delta table (nothing created there yet).
MISSING_TABLE_CONDITIONS = frozenset(
    {"DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND", "PATH_NOT_FOUND", "DELTA_PATH_DOES_NOT_EXIST"}
)


def condition(exc: BaseException) -> str | None:
    """The error condition (class) of a Spark error, if it has one."""
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        return str(get()) if callable(get) else None
    except Exception:  # a Py4J call on a half-converted error
        return None


def first_line(exc: BaseException) -> str:
    """The first line of a Spark error's message (its class name if empty)."""
    return error_summary(str(exc)) or type(exc).__name__


def read_delta(spark: SparkSession, uri: str) -> DataFrame | None:
    """The Delta table at ``uri`` as a DataFrame, or None when there is none yet."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.format("delta").load(uri)
    except AnalysisException as exc:
        if condition(exc) in MISSING_TABLE_CONDITIONS or "is not a Delta table" in str(exc):
            return None
        raise SqlError(f"cannot read {uri}: {first_line(exc)}", uri=uri) from exc
