"""A local S3 API server for tests, benchmarks and trying topiclake on object storage: moto's, concurrent.

moto's standalone server (``moto[server]``, a development dependency) keeps buckets in memory and speaks
the S3 API, including conditional writes (``If-None-Match: *`` answers ``412 PreconditionFailed`` when the
key exists, ``If-Match`` when its ETag differs). Its check and its write are two steps, though, and its
server is threaded: two concurrent conditional PUTs of one key can both succeed (reproduced: 9 keys of 200
with two winners when Python switches threads often). Plain requests race too: an overwrite or a DELETE
closes the old object's buffer while a GET or a listing may be reading it.

S3 makes each request on a key atomic, and Delta's safety rests on it, so this launcher runs moto's
application behind locks: every request naming a key holds that key's lock (one of 256, by a hash of
bucket and key) while moto runs it, so the check and the write of a conditional PUT, and an overwrite
against a GET, happen one after the other; requests of other keys run at the same time, as on S3. A
listing runs while no key changes (see :func:`_locked`); bucket-wide changes (create, delete, a
multi-object DELETE) run alone. Request bodies are read and response bodies sent outside every lock.

Run ``python -m topiclake.objectstore.devserver [--port N] [--locking keyed|serial]``: it prints
``listening on http://127.0.0.1:N`` and serves until killed (``serial``: one request at a time, the
server before it became concurrent, kept to measure against). :class:`LocalS3Server` starts it as a
subprocess and stops it by its pid.
"""

from __future__ import annotations

import argparse
import http.client
import io
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from topiclake.objectstore._proc import stop_process

_READY = "listening on "


_STRIPES = 256
_PATH_STYLE_HOSTS = ("localhost", "host.docker.internal")


def _bucket_and_key(environ: dict[str, Any]) -> tuple[str, str]:
    """The bucket and key a request names, path-style (``/bucket/key``) or virtual-hosted
    (``bucket.host/key``), as moto tells them apart: a host that is an address or ``localhost`` is
    path-style."""
    host = str(environ.get("HTTP_HOST", "")).rsplit(":", 1)[0]
    path = str(environ.get("PATH_INFO", "")).lstrip("/")
    first = host.split(".", 1)[0]
    if not host or host in _PATH_STYLE_HOSTS or first.isdigit() or "." not in host:
        bucket, _, key = path.partition("/")
        return bucket, key
    return first, path


class _Gate:
    """Many holders at once, or one alone; one waiting to be alone goes first (no starving it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0  # waiting to be alone

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._alone and self._shared == 0)
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


def _locked(app: Callable[..., Any], locking: str = "keyed") -> Callable[..., Any]:
    """moto's WSGI application, each request atomic per key (``keyed``) or one at a time (``serial``).

    The order of taking is fixed (bucket gate, listing gate, key stripe), so no two requests wait for each
    other. moto lists a bucket by copying its key names, then looking each one up and reading its ETag,
    which it may compute from the object's buffer: a DELETE in between fails the listing (``KeyError``),
    an overwrite closes the buffer (``ValueError``), both a 500 (seen under 8 threads). So a listing holds
    the listing gate alone and a key's change (PUT, POST, DELETE) shares it; GETs and HEADs of a key need
    only the key's stripe. A COPY reads a second key, and bucket changes touch them all: those run alone.
    """
    gate, listing = _Gate(), _Gate()
    stripes = [threading.Lock() for _ in range(_STRIPES)]

    def hold(environ: dict[str, Any]) -> AbstractContextManager[Any]:
        method = environ.get("REQUEST_METHOD", "")
        bucket, key = _bucket_and_key(environ)
        if locking == "serial" or "HTTP_X_AMZ_COPY_SOURCE" in environ:
            return gate.alone()
        if not key and method not in ("GET", "HEAD"):  # create or delete a bucket, multi-object DELETE
            return gate.alone()
        stack = ExitStack()
        stack.enter_context(gate.shared())
        if not key:
            stack.enter_context(listing.alone())
            return stack
        if method not in ("GET", "HEAD"):
            stack.enter_context(listing.shared())
        stack.enter_context(stripes[zlib.crc32(f"{bucket}/{key}".encode()) % _STRIPES])
        return stack

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # The body is read before any lock is taken: a client that stalls mid-body (or dies) must not
        # hold other requests behind it (seen: the server stuck for minutes under Spark executors'
        # uploads). What runs under the lock is moto's check and write; the answer is sent after.
        from werkzeug.wsgi import get_input_stream

        body = get_input_stream(environ).read()
        environ["wsgi.input"] = io.BytesIO(body)
        environ["wsgi.input_terminated"] = True
        environ["CONTENT_LENGTH"] = str(len(body))
        with hold(environ):
            return list(app(environ, start_response))

    return wrapped


def main(argv: list[str] | None = None) -> int:
    """Serve moto's S3 API on 127.0.0.1, each request atomic per key."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument(
        "--locking",
        choices=("keyed", "serial"),
        default="keyed",
        help="keyed: requests of other keys at once (default); serial: one request at a time",
    )
    args = parser.parse_args(argv)
    from moto.moto_server.werkzeug_app import (  # a dev dependency: imported only here
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class Handler(MotoRequestHandler):
        disable_nagle_algorithm = True  # headers and body are separate writes

    # moto's S3 application itself, not its dispatcher of all services: the dispatcher looks for the
    # service of every request by listing moto's ~180 service directories (a stat each) under one global
    # lock, ~35 % of a request's CPU here (profiled); this server serves S3 only.
    app = create_backend_app("s3")
    server = make_server(
        "127.0.0.1", args.port, _locked(app, args.locking), threaded=True, request_handler=Handler
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stdout.write(f"{_READY}http://127.0.0.1:{server.server_port}\n")
    sys.stdout.flush()
    server.serve_forever()
    return 0


class LocalS3Server:
    """The dev server as a subprocess on 127.0.0.1 (stopped by its pid).

    Args:
        port: Port to listen on (0: a free one, chosen by the server).
        locking: ``keyed`` (requests of other keys at once, as on S3) or ``serial`` (one at a time).
    """

    def __init__(self, port: int = 0, locking: str = "keyed") -> None:
        self._port = port
        self._locking = locking
        self._proc: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def start(self, timeout_s: float = 30.0) -> LocalS3Server:
        """Start the server and wait until it listens."""
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from topiclake.objectstore.devserver import main; main()",
                "--port",
                str(self._port),
                "--locking",
                self._locking,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = self._proc.stdout.readline()
        if not line.startswith(_READY) or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"the local S3 server did not start: {line!r}")
        self.endpoint = line[len(_READY) :].strip()
        return self

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self._proc is not None
        return self._proc.pid

    def create_bucket(self, name: str) -> None:
        """Create a bucket (moto checks no signature, so a plain request does)."""
        host, port = self.endpoint.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request("PUT", f"/{name}", body=b"", headers={"Content-Length": "0"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"cannot create bucket {name}: HTTP {resp.status}")
        finally:
            conn.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) by its pid."""
        proc, self._proc = self._proc, None
        stop_process(proc)

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
