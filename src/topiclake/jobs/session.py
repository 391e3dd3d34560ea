"""Moved to :mod:`topiclake.sparkenv.session` (issue 15: Spark's session and jars are shared infrastructure,
not jobs); these names stay importable from here."""

from __future__ import annotations

from topiclake.sparkenv.session import (
    CATALOG_DIR,
    DEFAULT_MASTER,
    DELTA_RS_COMPATIBLE_CONF,
    MASTER_ENV,
    WAREHOUSE_CONF,
    catalog_conf,
    get_spark,
    local_warehouse,
    spark_conf,
)

__all__ = [
    "CATALOG_DIR",
    "DEFAULT_MASTER",
    "DELTA_RS_COMPATIBLE_CONF",
    "MASTER_ENV",
    "WAREHOUSE_CONF",
    "catalog_conf",
    "get_spark",
    "local_warehouse",
    "spark_conf",
]
