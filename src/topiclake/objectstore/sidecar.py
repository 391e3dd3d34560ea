"""The counting proxy as a process of its own: a control address with ``/metrics``, and its driver.

Run ``python -m topiclake.objectstore.sidecar http://endpoint:port`` beside a broker and point the broker's
``AWS_ENDPOINT_URL`` at the address it prints; or let the gateway run it
(``TOPICLAKE_COUNT_OBJECT_STORE_REQUESTS=true``). A process of its own because some delta-rs calls hold
Python's GIL while they wait for the store: a proxy thread in the broker's process would wait for them,
and they for it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

from topiclake.objectstore._proc import stop_process
from topiclake.objectstore.proxy import OPS, S3Proxy

logger = logging.getLogger(__name__)


_CONTROL_READY = "proxy "


class _ControlHandler(BaseHTTPRequestHandler):
    server: _ControlServer

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("proxy control: " + format, *args)

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        proxy = self.server.proxy
        if self.path == "/metrics":
            self._reply(200, prometheus_text(proxy.counts()).encode(), "text/plain; version=0.0.4")
        elif self.path == "/counts":
            self._reply(200, json.dumps(proxy.counts()).encode())
        elif self.path == "/requests":
            self._reply(200, json.dumps(proxy.requests()).encode())
        else:
            self._reply(404, b"{}")

    def do_POST(self) -> None:
        proxy = self.server.proxy
        parsed = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        action = parsed.path.strip("/")
        if action == "reset":
            proxy.reset()
        elif action == "delay":
            proxy.delay_s = float(q.get("seconds", "0"))
        elif action == "errors":
            proxy.inject_errors(
                int(q.get("count", "1")),
                int(q.get("status", "503")),
                q.get("code", "SlowDown"),
                q.get("op"),
                q.get("match", ""),
            )
        elif action == "cut":
            proxy.cut_after_store(int(q.get("count", "1")), q.get("op"), q.get("match", ""))
        elif action == "record":
            proxy.record(q.get("on", "true") == "true")
        elif action == "down":
            proxy.down()
        elif action == "up":
            proxy.up()
        elif action == "conditions":
            proxy.ignore_conditions = q.get("ignore", "false") == "true"
        else:
            self._reply(404, b"{}")
            return
        self._reply(200, b"{}")


class _ControlServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, proxy: S3Proxy) -> None:
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), _ControlHandler)


def prometheus_text(counts: Mapping[str, int]) -> str:
    """The counters in Prometheus' text format: ``topiclake_object_store_requests_total{op=...}``."""
    lines = [
        "# HELP topiclake_object_store_requests_total Requests to the object store, by S3 operation, "
        "counted by the proxy in front of it",
        "# TYPE topiclake_object_store_requests_total counter",
    ]
    lines += [f'topiclake_object_store_requests_total{{op="{op}"}} {counts.get(op, 0)}' for op in OPS]
    lines += [
        "# HELP topiclake_object_store_injected_errors_total Errors the proxy answered instead of the store",
        "# TYPE topiclake_object_store_injected_errors_total counter",
        f"topiclake_object_store_injected_errors_total {counts.get('injected_errors', 0)}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the proxy: ``python -m topiclake.objectstore.sidecar UPSTREAM [--port N]``.

    Prints ``proxy http://127.0.0.1:PORT control http://127.0.0.1:CPORT`` once it listens. The control
    address serves ``GET /metrics`` (Prometheus), ``GET /counts``, ``GET /requests`` and ``POST /reset``,
    ``/record?on=true|false``, ``/delay?seconds=``, ``/errors?count=&status=&code=&op=``, ``/down``,
    ``/up``, ``/conditions?ignore=true|false``.
    """
    parser = argparse.ArgumentParser(description="A counting S3 proxy on 127.0.0.1")
    parser.add_argument("upstream", help="the S3 endpoint, http://host:port")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    proxy = S3Proxy(args.upstream, args.port).start()
    control = _ControlServer(proxy)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stdout.write(f"{_CONTROL_READY}{proxy.endpoint} control http://127.0.0.1:{control.server_port}\n")
    sys.stdout.flush()
    control.serve_forever()
    return 0


class ProxyProcess:
    """:class:`S3Proxy` in a process of its own, driven over its control address; stopped by its pid.

    Args:
        upstream: The S3 endpoint, ``http://host:port``.
    """

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._proc: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.control = ""

    def start(self) -> ProxyProcess:
        """Start the proxy and wait until it listens."""
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from topiclake.objectstore.sidecar import main; main()", self._upstream],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 4 or line[0] != _CONTROL_READY.strip():
            self.stop()
            raise RuntimeError(f"the S3 proxy did not start: {line!r}")
        self.endpoint, self.control = line[1], line[3]
        return self

    @property
    def pid(self) -> int:
        """The proxy's process id."""
        assert self._proc is not None
        return self._proc.pid

    def _call(self, method: str, path: str) -> bytes:
        host, port = self.control.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(method, path, body=b"" if method == "POST" else None)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"proxy control {path}: HTTP {resp.status}")
            return data
        finally:
            conn.close()

    def counts(self) -> dict[str, int]:
        """Requests forwarded so far, by operation."""
        counts: dict[str, int] = json.loads(self._call("GET", "/counts"))
        return counts

    def metrics(self) -> str:
        """The counters in Prometheus' text format."""
        return self._call("GET", "/metrics").decode()

    def reset(self) -> None:
        """Zero the counters."""
        self._call("POST", "/reset")

    def record(self, on: bool = True) -> None:
        """Keep a log of every request from now on (off: stop and forget it), for :meth:`requests`."""
        self._call("POST", f"/record?on={'true' if on else 'false'}")

    def requests(self) -> list[tuple[float, str, str, str]]:
        """(monotonic time, operation, method, path) of every request since :meth:`record`."""
        return [
            (float(t), str(op), str(m), str(path))
            for t, op, m, path in json.loads(self._call("GET", "/requests"))
        ]

    def delay(self, seconds: float) -> None:
        """Make every request wait this long before it is forwarded (0: none)."""
        self._call("POST", f"/delay?seconds={seconds}")

    def inject_errors(
        self,
        count: int,
        status: int = 503,
        code: str = "SlowDown",
        op: str | None = None,
        path_contains: str = "",
    ) -> None:
        """Answer the next ``count`` requests (of operation ``op``, or any, whose path contains
        ``path_contains``) with an S3 error."""
        query = {
            "count": count,
            "status": status,
            "code": code,
            "match": path_contains,
            **({"op": op} if op else {}),
        }
        self._call("POST", f"/errors?{urlencode(query)}")

    def cut_after_store(self, count: int, op: str | None = None, path_contains: str = "") -> None:
        """Forward the next ``count`` matching requests, then drop the connection unanswered."""
        query = urlencode({"count": count, "match": path_contains, **({"op": op} if op else {})})
        self._call("POST", f"/cut?{query}")

    def down(self) -> None:
        """Refuse connections, as a stopped server does."""
        self._call("POST", "/down")

    def up(self) -> None:
        """Serve again."""
        self._call("POST", "/up")

    def ignore_conditions(self, ignore: bool = True) -> None:
        """Strip conditional-write headers: a store without If-None-Match."""
        self._call("POST", f"/conditions?ignore={'true' if ignore else 'false'}")

    def stop(self) -> None:
        """Stop the proxy (SIGTERM, then SIGKILL) by its pid."""
        proc, self._proc = self._proc, None
        stop_process(proc)

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())


def counting_endpoint(options: Mapping[str, str]) -> tuple[ProxyProcess, dict[str, str]]:
    """Start a counting proxy in front of the S3 endpoint of ``options`` (or of ``AWS_ENDPOINT_URL``).

    Returns the proxy and the options to open the warehouse with (its endpoint is the proxy's).

    Raises:
        ValueError: No endpoint, or not a plain-HTTP one (the proxy cannot count HTTPS requests).
    """
    lowered = {k.lower(): k for k in options}
    key = lowered.get("aws_endpoint_url") or lowered.get("endpoint") or "AWS_ENDPOINT_URL"
    endpoint = options.get(key) or os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint.startswith("http://"):
        raise ValueError(
            "counting object-store requests needs a plain-HTTP S3 endpoint (AWS_ENDPOINT_URL=http://...), "
            f"not {endpoint or 'AWS S3 itself'}: use S3's request metrics there"
        )
    proxy = ProxyProcess(endpoint).start()
    logger.info("counting object-store requests: %s -> %s", proxy.endpoint, endpoint)
    return proxy, {**options, key: proxy.endpoint}
