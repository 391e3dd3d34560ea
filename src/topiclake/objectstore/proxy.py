"""A counting, fault-injecting reverse proxy for an S3 (or Azure Blob) endpoint reached over plain HTTP.

delta-rs talks to S3 from Rust: no Python hook sees its requests. Pointing its endpoint
(``AWS_ENDPOINT_URL``) at this proxy on 127.0.0.1 counts every request by S3 operation, and lets tests
make the endpoint slow, answer ``503 SlowDown``, or vanish (connections refused) for a while.

What it can count: requests to an endpoint reached over ``http://`` whose signature does not cover the
proxy's address (S3-compatible servers such as MinIO and moto on a private network accept path-style
requests signed for the host they are sent to; AWS S3 itself is HTTPS and would reject a re-targeted
signature). It is a measuring and testing tool, not a production data path.
"""

from __future__ import annotations

import html
import http.client
import logging
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

logger = logging.getLogger(__name__)

#: S3 operations the proxy tells apart (the ``op`` label of the request counter).
OPS = ("GET", "HEAD", "LIST", "PUT", "COPY", "DELETE", "MULTIPART", "OTHER")

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


def classify(method: str, path_and_query: str, headers: Mapping[str, str]) -> str:
    """The S3 operation of a request: one of :data:`OPS`."""
    query = parse_qs(urlparse(path_and_query).query, keep_blank_values=True)
    comp = query.get("comp", [""])[0]  # Azure Blob: ?comp=list, ?comp=block, ?comp=blocklist
    if "uploads" in query or "uploadId" in query or comp in ("block", "blocklist"):
        return "MULTIPART"
    if method == "GET":
        path = urlparse(path_and_query).path.strip("/")
        return "LIST" if "list-type" in query or comp == "list" or "/" not in path else "GET"
    if method == "HEAD":
        return "HEAD"
    if method == "PUT":
        lowered = {k.lower() for k in headers}
        return "COPY" if lowered & {"x-amz-copy-source", "x-ms-copy-source"} else "PUT"
    if method == "DELETE" or (method == "POST" and "delete" in query):
        return "DELETE"
    return "OTHER"


_BLOB = re.compile(rb"<Blob>.*?</Blob>", re.DOTALL)
_NAME = re.compile(rb"<Name>(.*?)</Name>", re.DOTALL)


def start_from(path_and_query: str, listing: bytes) -> bytes:
    """An Azure List Blobs answer without the blobs before its ``startFrom`` (inclusive bound).

    object_store lists a Delta log from a version on with ``startFrom`` (Blob API 2023-11-03); Azurite
    3.35, the last release for Node 20, ignores it and lists from the start, and delta-rs then fails every
    commit after a table's first checkpoint ("Invalid table version"). Azure honours it; so does this
    proxy, in front of Azurite in the tests. Other answers pass unchanged.
    """
    first = parse_qs(urlparse(path_and_query).query).get("startFrom", [""])[0].encode()
    if not first:
        return listing

    def keep(blob: re.Match[bytes]) -> bytes:
        name = _NAME.search(blob.group(0))
        return (
            blob.group(0) if name is None or html.unescape(name.group(1).decode()).encode() >= first else b""
        )

    return _BLOB.sub(keep, listing)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without it each waits ~40 ms
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("proxy: " + format, *args)

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._body()
        op = classify(self.command, self.path, dict(self.headers.items()))
        if proxy.is_down():
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        proxy._count(op, self.command, self.path, dict(self.headers.items()))
        delay = proxy.delay_s
        if delay > 0:
            time.sleep(delay)
        error = proxy._take_error(op, self.path)
        if error is not None:
            status, code = error
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by the test proxy</Message></Error>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        conn = proxy._connection()
        drop = _HOP_BY_HOP | ({"if-none-match", "if-match"} if proxy.ignore_conditions else set())
        headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
        if body or self.command in ("PUT", "POST"):
            # one Content-Length, whatever case the client wrote it in: Node's parser (Azurite) answers 400
            # to two
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(body))
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            proxy._drop_connection()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if proxy._take_cut(op, self.path):  # the store took it; the client never hears so
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if op == "LIST" and resp.status == 200:
            data = start_from(self.path, data)
        self.send_response_only(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        length = resp.getheader("Content-Length")
        self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], proxy: S3Proxy) -> None:
        self.proxy = proxy
        super().__init__(address, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # a client gone mid-answer (a killed broker, a dropped connection while down): not the proxy's fault
        logger.debug("proxy: connection from %s failed", client_address, exc_info=True)


class S3Proxy:
    """A reverse proxy on 127.0.0.1 in front of an S3 API endpoint, counting requests by operation.

    Args:
        upstream: The endpoint, ``http://host:port``.
        port: Port to listen on (0: a free one).

    Use :attr:`endpoint` as ``AWS_ENDPOINT_URL``. Faults: :attr:`delay_s` (every request waits),
    :meth:`inject_errors` (the next N requests answer an S3 error, e.g. ``503 SlowDown``),
    :meth:`down` / :meth:`up` (the endpoint refuses connections, as a stopped server does),
    :attr:`ignore_conditions` (conditional writes are ignored, as by a store without them),
    :meth:`cut_after_store` (the store acts, the answer is lost).
    """

    def __init__(self, upstream: str, port: int = 0) -> None:
        parsed = urlparse(upstream)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise ValueError(f"the proxy forwards to http:// endpoints only, not {upstream!r}")
        self._upstream = (parsed.hostname, parsed.port or 80)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._log: list[tuple[float, str, str, str]] | None = None
        self._errors: list[tuple[int, str, str | None, str]] = []
        self._cuts: list[tuple[str | None, str]] = []
        self._down = False
        self._local = threading.local()
        self.delay_s = 0.0
        #: Strip If-None-Match/If-Match before forwarding: a server without conditional writes.
        self.ignore_conditions = False
        self._server = _Server(("127.0.0.1", port), self)
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The proxy's URL, to use as ``AWS_ENDPOINT_URL``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Proxy:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ counting

    def counts(self) -> dict[str, int]:
        """Requests forwarded so far, by operation."""
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Zero the counters (and the request log, if recording)."""
        with self._lock:
            self._counts.clear()
            if self._log is not None:
                self._log.clear()

    def record(self, on: bool = True) -> None:
        """Keep a log of (time, op, method, path) of every request, for :meth:`requests`."""
        with self._lock:
            self._log = [] if on else None

    def requests(self) -> list[tuple[float, str, str, str]]:
        """The recorded requests (see :meth:`record`)."""
        with self._lock:
            return list(self._log or [])

    def _count(self, op: str, method: str, path: str, headers: Mapping[str, str]) -> None:
        with self._lock:
            self._counts[op] += 1
            if self._log is not None:
                cond = " If-None-Match" if any(k.lower() == "if-none-match" for k in headers) else ""
                self._log.append((time.monotonic(), op, method + cond, path))

    # ------------------------------------------------------------------ faults

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
        with self._lock:
            self._errors.extend([(status, code, op, path_contains)] * count)

    def _take_error(self, op: str, path: str) -> tuple[int, str] | None:
        with self._lock:
            for i, (status, code, only, part) in enumerate(self._errors):
                if (only is None or only == op) and part in path:
                    del self._errors[i]
                    self._counts["injected_errors"] += 1
                    return status, code
        return None

    def cut_after_store(self, count: int, op: str | None = None, path_contains: str = "") -> None:
        """Forward the next ``count`` requests (of operation ``op``, or any, whose path contains
        ``path_contains``) to the store, then close the client's connection without answering: the
        store has acted, the client cannot know (an outcome-unknown request)."""
        with self._lock:
            self._cuts.extend([(op, path_contains)] * count)

    def _take_cut(self, op: str, path: str) -> bool:
        with self._lock:
            for i, (only, part) in enumerate(self._cuts):
                if (only is None or only == op) and part in path:
                    del self._cuts[i]
                    self._counts["cut_after_store"] += 1
                    return True
        return False

    def down(self) -> None:
        """Refuse connections and drop the open ones, as a stopped server does."""
        with self._lock:
            self._down = True
        self._server.shutdown()
        self._server.server_close()
        logger.info("s3 proxy on port %d: down", self.port)

    def up(self) -> None:
        """Serve again on the same port."""
        self._server = _Server(("127.0.0.1", self.port), self)
        with self._lock:
            self._down = False
        self.start()
        logger.info("s3 proxy on port %d: up", self.port)

    def is_down(self) -> bool:
        """Whether the endpoint is down."""
        with self._lock:
            return self._down

    # ------------------------------------------------------------------ upstream connections

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(*self._upstream, timeout=60)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
