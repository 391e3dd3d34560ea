"""Spark jobs (compaction, retention, key compaction, reprocessing) and the Spark session builder."""

from topiclake.jobs.session import get_spark

__all__ = ["get_spark"]
