"""Moved to :mod:`topiclake.sparkenv.jars` (issue 15: Spark's session and jars are shared infrastructure,
not jobs); these names stay importable from here."""

from __future__ import annotations

import sys

from topiclake.sparkenv.jars import (
    cache_dir,
    delta_artifact,
    jar_paths,
    main,
    resolve,
    s3a_jar_paths,
)

__all__ = [
    "cache_dir",
    "delta_artifact",
    "jar_paths",
    "main",
    "resolve",
    "s3a_jar_paths",
]


if __name__ == "__main__":
    sys.exit(main())
