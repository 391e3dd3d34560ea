"""Fixtures of the object-storage tests (defined in s3_harness.py, a module name unique in the suite)."""

from s3_harness import s3, s3_server

__all__ = ["s3", "s3_server"]
