"""Which allocator ``topiclake serve`` gives Arrow's buffers.

A broker's Arrow memory is mostly short-lived: tables decoded from Kafka batches, Parquet files written
and read, fetch answers. What the process keeps after they are freed depends on the allocator, not on
what it still uses (docs/decisions.md, "Broker memory: an Arrow pool that gives memory back"): pyarrow's
default pool on Linux, mimalloc, kept the segments of its peak (a broker that had read 1,000,000 records
held ~560 MiB with ~70 MiB in Arrow's pool); jemalloc returns dirty pages after a second (Arrow's decay
setting), which is what the broker uses unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool.

What Python, orjson and the Kafka codec allocate comes from glibc's heap, which
keeps the free pages between live blocks (a heap's top is trimmed by ``free``, holes are not): ``topiclake
serve`` hands them back every :data:`TRIM_INTERVAL_S` (:func:`trim_heap_periodically`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping

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


#: How often ``topiclake serve`` gives glibc's free heap pages back, seconds (issue 30: the broker's RSS at
#: the end of the Kafka comparison run was ~35 MiB over Kafka's; a trim gave back ~56 MiB of ~590 in process).
TRIM_INTERVAL_S = 10.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim this way
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Give the free pages of glibc's heaps back to the system (``malloc_trim(0)``; the GIL is released
    meanwhile). Returns whether anything was given back (False off glibc)."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))


def trim_heap_periodically(interval_s: float = TRIM_INTERVAL_S) -> threading.Thread | None:
    """A daemon thread calling :func:`trim_heap` every ``interval_s``; None off glibc."""
    trim = _malloc_trim()
    if trim is None:
        return None

    def run() -> None:
        while True:
            time.sleep(interval_s)
            trim(0)

    thread = threading.Thread(target=run, name="malloc-trim", daemon=True)
    thread.start()
    return thread
