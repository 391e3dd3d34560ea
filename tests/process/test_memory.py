"""The allocators ``topiclake serve`` chooses (jemalloc for Arrow, glibc's fixed mmap threshold), and that
the environment overrides both. Each case runs in its own interpreter: the choice is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

_PROBE = """
import ctypes, sys
from topiclake.process.memory import choose_arrow_pool, fix_mmap_threshold
fixed = fix_mmap_threshold() if sys.argv[1] == "fix" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(4 << 20))  # glibc's dynamic threshold rises past a freed mapped block of 4 MiB
block = libc.malloc(1 << 20)  # a 1 MiB frame: mapped (given back when freed) or carved from the heap
heap = [line for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
lo, hi = (int(x, 16) for x in heap[0].split()[0].split("-")) if heap else (0, 0)
libc.free(block)
print(choose_arrow_pool(), fixed, "heap" if lo <= block < hi else "mapped")
"""


def _probe(env: dict[str, str], fix: bool = True) -> list[str]:
    names = ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_")
    clean = {k: v for k, v in os.environ.items() if k not in names}
    cmd = [sys.executable, "-c", _PROBE, "fix" if fix else "keep"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**clean, **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif("jemalloc" not in pa.supported_memory_backends(), reason="pyarrow without jemalloc")
def test_serve_takes_jemalloc_and_maps_big_blocks_unless_the_environment_says_otherwise() -> None:
    assert _probe({}) == ["jemalloc", "True", "mapped"]
    assert _probe({}, fix=False)[2] == "heap"  # what glibc does on its own: the frame stays in the heap
    assert _probe({"ARROW_DEFAULT_MEMORY_POOL": "system"})[0] == "system"
    assert _probe({"MALLOC_MMAP_THRESHOLD_": "8388608"})[1:] == ["False", "heap"]  # glibc reads it itself
