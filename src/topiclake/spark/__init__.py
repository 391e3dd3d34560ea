"""topiclake for Spark: the ``topiclake`` data source (Kafka-compatible source and sink) and SQL tables.

```python
from topiclake.jobs import get_spark

spark = get_spark(warehouse="./data")  # registers the "topiclake" format
df = spark.readStream.format("topiclake").option("subscribe", "orders").load()
```

Any other session: call :func:`register` once (after setting ``spark.topiclake.warehouse``, if used).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]

logger = logging.getLogger(__name__)

#: Spark conf key of the default warehouse (same as ``topiclake.sparkenv.session.WAREHOUSE_CONF``).
_WAREHOUSE_CONF = "spark.topiclake.warehouse"


def register(spark: SparkSession) -> None:
    """Register the ``topiclake`` data source with a session.

    The session's ``spark.topiclake.warehouse`` (if set) becomes the default of the ``warehouse`` option:
    Spark gives a Python data source only its options, so the default is read here, on the driver, and
    travels with the registered class. Call again after changing that conf.

    Args:
        spark: The session (classic or Spark Connect).
    """
    from topiclake.spark.datasource import TopiclakeDataSource

    warehouse = spark.conf.get(_WAREHOUSE_CONF, None)
    spark.dataSource.register(TopiclakeDataSource.configured(warehouse or None))
    logger.info("registered the topiclake data source (default warehouse %s)", warehouse)
