"""Free TCP ports on 127.0.0.1 for servers that tests, benchmarks and local tools start.

Binding port 0 and closing the socket -- the usual trick -- hands out a port from the kernel's ephemeral
range, where the next outgoing connection of any process may take it before the server binds it, and
where two calls in a row, or two pytest-xdist workers, may be given the same one (CI once saw one broker
draw the same port for HTTP and Kafka). :func:`free_port` instead picks ports *below* the ephemeral range,
which the kernel never hands out on its own, and:

- never returns the same port twice in one process;
- never returns a port another process reserved in the last :data:`RESERVATION_S` seconds: each port is
  claimed by creating ``<tmp>/topiclake-ports-<uid>/<port>`` exclusively (``O_EXCL``), so pytest-xdist
  workers, the servers and benchmarks they spawn, and other test runs on the machine never share one;
- returns it only if it can be bound on 127.0.0.1 right now.

A reservation outlives the window between choosing a port and a server binding it; a bound port is then
protected by the bind itself. See docs/decisions.md ("One free_port").
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

#: How long a port claimed by one process is not handed out to another.
RESERVATION_S = 300.0
#: The lowest port handed out (above the well-known and most registered service ports).
LOWEST_PORT = 20000
_DEFAULT_EPHEMERAL = (32768, 60999)

_lock = threading.Lock()
_handed_out: set[int] = set()
_order: list[int] = []


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's ``ip_local_port_range``; Linux's default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def _candidates() -> list[int]:
    """Ports outside the ephemeral range, from :data:`LOWEST_PORT` on, in one random order per process."""
    if not _order:
        low, high = _ephemeral_range()
        _order.extend(p for p in range(LOWEST_PORT, 65536) if not low <= p <= high)
        random.shuffle(_order)
    return _order


def _reservations() -> Path:
    directory = Path(tempfile.gettempdir()) / f"topiclake-ports-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def _reserve(directory: Path, port: int) -> bool:
    """Claim ``port`` for this process unless another process claimed it less than RESERVATION_S ago."""
    path = directory / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - path.stat().st_mtime < RESERVATION_S:
                    return False
                path.unlink()  # a stale claim; if two processes race here, O_EXCL picks one
            continue
        with os.fdopen(fd, "w") as out:
            out.write(f"{os.getpid()}\n")
        return True
    return False


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                return False
            raise
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no process was handed out recently.

    Returns:
        The port; a server should bind it within :data:`RESERVATION_S` seconds.

    Raises:
        RuntimeError: Every candidate port was handed out already or is in use.
    """
    with _lock:
        directory = _reservations()
        candidates = _candidates()
        while candidates:
            port = candidates.pop()
            if port in _handed_out or not _reserve(directory, port):
                continue
            _handed_out.add(port)
            if _bindable(port):
                return port
        raise RuntimeError(f"no free TCP port left on 127.0.0.1 ({len(_handed_out)} handed out here)")
