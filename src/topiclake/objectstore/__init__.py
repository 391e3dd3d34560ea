"""Object storage: a local S3 API server and a counting, fault-injecting proxy (tests and benchmarks)."""

from topiclake.objectstore.devserver import LocalS3Server
from topiclake.objectstore.proxy import OPS, S3Proxy, classify
from topiclake.objectstore.sidecar import ProxyProcess, counting_endpoint, prometheus_text

__all__ = [
    "OPS",
    "LocalS3Server",
    "ProxyProcess",
    "S3Proxy",
    "classify",
    "counting_endpoint",
    "prometheus_text",
]
