"""Which allocator ``topiclake serve`` gives Arrow's buffers.

A broker's Arrow memory is mostly short-lived: tables decoded from Kafka batches, Parquet files written
and read, fetch answers. What the process keeps after they are freed depends on the allocator, not on
what it still uses (docs/decisions.md, "Broker memory: an Arrow pool that gives memory back"): pyarrow's
default pool on Linux, mimalloc, kept the segments of its peak (a broker that had read 1,000,000 records
held ~560 MiB with ~70 MiB in Arrow's pool); jemalloc returns dirty pages after a second (Arrow's decay
setting), which is what the broker uses unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import pyarrow as pa

logger = logging.getLogger(__name__)


def choose_arrow_pool(environ: Mapping[str, str] = os.environ) -> str:
    """Make jemalloc Arrow's default pool unless ``ARROW_DEFAULT_MEMORY_POOL`` chose one (or this
    pyarrow has no jemalloc); return the backend in use."""
    if "ARROW_DEFAULT_MEMORY_POOL" not in environ:
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc
            logger.info("pyarrow has no jemalloc; Arrow keeps its default memory pool")
    return str(pa.default_memory_pool().backend_name)
