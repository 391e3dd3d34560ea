"""The Arrow pool ``topiclake serve`` chooses (jemalloc), and that the environment overrides it. Each case
runs in its own interpreter: the choice is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

_PROBE = """
import pyarrow as pa
from topiclake.process.memory import choose_arrow_pool
print(choose_arrow_pool())
buf = pa.allocate_buffer(1 << 20)  # a buffer of the default pool comes from the chosen allocator
print(pa.default_memory_pool().bytes_allocated() >= 1 << 20, pa.default_memory_pool().backend_name)
"""


def _probe(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env={**clean, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif("jemalloc" not in pa.supported_memory_backends(), reason="pyarrow without jemalloc")
def test_serve_takes_jemalloc_unless_the_environment_names_a_pool() -> None:
    assert _probe({}) == ["jemalloc", "True", "jemalloc"]
    assert _probe({"ARROW_DEFAULT_MEMORY_POOL": "system"}) == ["system", "True", "system"]


_TRIM_PROBE = """
import sys
from topiclake.process.memory import trim_heap

def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1])

big, pins = [], []
for _ in range(1500):  # 96 MiB of heap blocks below the mmap threshold, each pinned in place by a small one
    big.append(bytearray(64 * 1024))
    pins.append(bytearray(700))
del big  # free holes inside the heap: free() does not give them back, only its top
before = rss()
print(trim_heap(), before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_heap_gives_back_the_free_holes_of_the_heap() -> None:
    out = subprocess.run([sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    released, kib = out.stdout.split()
    assert released == "True" and int(kib) > 64 * 1024, out.stdout  # most of the 96 MiB
