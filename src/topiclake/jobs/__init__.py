"""Spark jobs (compaction, retention, key compaction, reprocessing).

One module per job: ``compact``, ``retention``, ``compact_keys``, ``vacuum``, ``reprocess``, each with
``parser()``, ``main(argv)`` and ``run(spark, config, progress=None) -> JobResult`` (docs/jobs.md); what they
share is in ``_common`` (arguments, results, retries, ``main``) and ``_tables`` (topic tables, the rewrite).

``get_spark`` (the session builder) and the ``session`` and ``jars`` modules live in
:mod:`topiclake.sparkenv`, shared with the data source and ``topiclake sql``; they stay importable from
here. ``get_spark`` is loaded on first use, so ``python -m topiclake.jobs.jars`` runs without this package
having imported that module first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topiclake.sparkenv.session import get_spark

__all__ = ["get_spark"]


def __getattr__(name: str) -> Any:
    if name == "get_spark":
        from topiclake.sparkenv.session import get_spark

        return get_spark
    raise AttributeError(f"module 'topiclake.jobs' has no attribute {name!r}")
