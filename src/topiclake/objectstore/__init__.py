"""Object storage: a local S3 API server and a counting, fault-injecting proxy (tests and benchmarks).

The names load on first use, so ``python -m topiclake.objectstore.devserver`` (or ``.sidecar``) runs its
module once, as ``__main__``, without this package having imported it first (runpy warns otherwise).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topiclake.objectstore.devserver import LocalS3Server
    from topiclake.objectstore.proxy import OPS, S3Proxy, classify
    from topiclake.objectstore.sidecar import ProxyProcess, counting_endpoint, prometheus_text

_HOMES = {
    "OPS": "proxy",
    "LocalS3Server": "devserver",
    "ProxyProcess": "sidecar",
    "S3Proxy": "proxy",
    "classify": "proxy",
    "counting_endpoint": "sidecar",
    "prometheus_text": "sidecar",
}

__all__ = [
    "OPS",
    "LocalS3Server",
    "ProxyProcess",
    "S3Proxy",
    "classify",
    "counting_endpoint",
    "prometheus_text",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'topiclake.objectstore' has no attribute {name!r}")
    return getattr(importlib.import_module(f"topiclake.objectstore.{home}"), name)
