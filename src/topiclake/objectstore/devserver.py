"""A local S3 API server for tests, benchmarks and trying topiclake on object storage: moto's, serialised.

moto's standalone server (``moto[server]``, a development dependency) keeps buckets in memory and speaks
the S3 API, including conditional writes (``If-None-Match: *`` answers ``412 PreconditionFailed`` when the
key exists). Its check and its write are two steps, though, and its server is threaded: two concurrent
conditional PUTs of one key can both succeed (reproduced: 9 keys of 200 with two winners when Python
switches threads often). S3 itself makes the check atomic, and Delta's safety rests on it, so this
launcher runs moto's application behind one lock: one request at a time, each atomic, as on S3.

Run ``python -m topiclake.objectstore.devserver [--port N]``: it prints ``listening on http://127.0.0.1:N``
and serves until killed. :class:`LocalS3Server` starts it as a subprocess and stops it by its pid.
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
from collections.abc import Callable, Iterable
from typing import Any

from topiclake.objectstore._proc import stop_process

_READY = "listening on "


def _serialised(app: Callable[..., Any]) -> Callable[..., Any]:
    lock = threading.Lock()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # The body is read before the lock is taken: a client that stalls mid-body (or dies) must not
        # hold every other request behind it (seen: the server stuck for minutes under Spark executors'
        # uploads). What runs under the lock is moto's check and write, as before.
        from werkzeug.wsgi import get_input_stream

        body = get_input_stream(environ).read()
        environ["wsgi.input"] = io.BytesIO(body)
        environ["wsgi.input_terminated"] = True
        environ["CONTENT_LENGTH"] = str(len(body))
        with lock:
            return list(app(environ, start_response))

    return wrapped


def main(argv: list[str] | None = None) -> int:
    """Serve moto's S3 API on 127.0.0.1, one request at a time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    args = parser.parse_args(argv)
    from moto.moto_server.werkzeug_app import (  # a dev dependency: imported only here
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class Handler(MotoRequestHandler):
        disable_nagle_algorithm = True  # headers and body are separate writes

    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", args.port, _serialised(app), threaded=True, request_handler=Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stdout.write(f"{_READY}http://127.0.0.1:{server.server_port}\n")
    sys.stdout.flush()
    server.serve_forever()
    return 0


class LocalS3Server:
    """The dev server as a subprocess on 127.0.0.1 (stopped by its pid).

    Args:
        port: Port to listen on (0: a free one, chosen by the server).
    """

    def __init__(self, port: int = 0) -> None:
        self._port = port
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
