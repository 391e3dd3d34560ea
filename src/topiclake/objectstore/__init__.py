"""Object storage: a local S3 API server and a counting, fault-injecting proxy (tests and benchmarks)."""

from topiclake.objectstore.devserver import LocalS3Server
from topiclake.objectstore.proxy import OPS, ProxyProcess, S3Proxy, classify, prometheus_text

__all__ = [
    "OPS",
    "LocalS3Server",
    "ProxyProcess",
    "S3Proxy",
    "classify",
    "prometheus_text",
]
