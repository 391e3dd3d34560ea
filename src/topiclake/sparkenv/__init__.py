"""Spark's environment, shared by the jobs, the ``topiclake`` data source and ``topiclake sql``.

``session`` is the one session builder (:func:`get_spark`: Delta from the local jar cache, the settings that
keep tables writable by delta-rs, the project's Python on the workers); ``jars`` resolves Delta's jars once
(``python -m topiclake.sparkenv.jars resolve``). Both lived in ``topiclake.jobs`` (still importable there).

``get_spark`` is loaded on first use, so ``python -m topiclake.sparkenv.jars`` runs without this package
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
    raise AttributeError(f"module 'topiclake.sparkenv' has no attribute {name!r}")
