"""How ``topiclake serve`` allocates: Arrow's memory pool and glibc's threshold for mapped blocks.

A broker's memory is mostly short-lived buffers: Arrow tables decoded from Kafka batches, Parquet files
written and read, 1 MiB request and answer frames. What the process keeps after they are freed depends on
the allocators, not on what it still uses (docs/decisions.md, "Broker memory: allocators that give
memory back"):

- pyarrow's default pool on Linux, mimalloc, kept the segments of its peak (a broker that had read
  1,000,000 records held ~560 MiB with ~70 MiB in Arrow's pool); jemalloc returns dirty pages after a
  second (Arrow's decay setting), which is what the broker now uses unless ``ARROW_DEFAULT_MEMORY_POOL``
  names a pool.
- glibc raises its mmap threshold each time a mapped block is freed, up to 32 MiB, after which 1 MiB
  frames come from the heap and fragment it; a fixed threshold (256 KiB) keeps every big frame mapped,
  so freeing it returns it. ``MALLOC_MMAP_THRESHOLD_`` in the environment wins, as glibc reads it itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Mapping

import pyarrow as pa

logger = logging.getLogger(__name__)

#: Blocks at least this big are mapped (and unmapped when freed) by glibc's malloc.
MMAP_THRESHOLD_BYTES = 256 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)


def choose_arrow_pool(environ: Mapping[str, str] = os.environ) -> str:
    """Make jemalloc Arrow's default pool unless ``ARROW_DEFAULT_MEMORY_POOL`` chose one (or this
    pyarrow has no jemalloc); return the backend in use."""
    if "ARROW_DEFAULT_MEMORY_POOL" not in environ:
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc
            logger.info("pyarrow has no jemalloc; Arrow keeps its default memory pool")
    return str(pa.default_memory_pool().backend_name)


def fix_mmap_threshold(environ: Mapping[str, str] = os.environ) -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` unless ``MALLOC_MMAP_THRESHOLD_`` is
    set; False where there is no glibc ``mallopt`` (or it refused)."""
    if "MALLOC_MMAP_THRESHOLD_" in environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
