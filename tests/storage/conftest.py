"""Fixtures of the object-storage tests (defined in s3_harness.py and store_harness.py, module names unique
in the suite)."""

from s3_harness import s3, s3_server
from store_harness import azure, azurite, store

__all__ = ["azure", "azurite", "s3", "s3_server", "store"]
