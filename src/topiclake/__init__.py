"""topiclake: a Kafka-style streaming platform whose partitions are Delta Lake tables."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("topiclake")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
