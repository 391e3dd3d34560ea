"""topiclake: a Kafka-style streaming platform whose partitions are Delta Lake tables."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed distribution on first use: importing
    :mod:`importlib.metadata` (its email parser with it) is ~40 ms of every CLI process's start, and most
    never print a version."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("topiclake")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        found = "0.0.0"
    globals()["__version__"] = found
    return found
