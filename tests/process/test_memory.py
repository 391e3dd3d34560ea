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
