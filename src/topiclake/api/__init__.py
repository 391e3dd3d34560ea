"""The HTTP gateway (FastAPI). Never imports pyspark."""

from topiclake.api.app import create_app

__all__ = ["create_app"]
