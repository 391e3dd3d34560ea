"""A Spark pipeline topic ``in`` -> upper-case -> topic ``out`` for tests/spark/test_pipeline_crash.py.

Usage: ``python _pipeline_worker.py WAREHOUSE CHECKPOINT``

Runs until killed: a streaming query reading ``in`` with the ``topiclake`` source (at most 40 records per
micro-batch) and writing the upper-cased values to ``out`` with the ``topiclake`` sink, checkpointed in
CHECKPOINT. The test kills it with SIGKILL in the middle and starts it again on the same checkpoint.
"""

from __future__ import annotations

import sys

from topiclake.jobs.session import get_spark


def main() -> None:
    warehouse, checkpoint = sys.argv[1], sys.argv[2]
    spark = get_spark("local[1]", "pipeline-worker", conf={"spark.ui.showConsoleProgress": "false"})
    query = (
        spark.readStream.format("topiclake")
        .option("warehouse", warehouse)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("topiclake")
        .option("warehouse", warehouse)
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
