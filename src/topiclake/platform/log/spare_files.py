"""Empty files created ahead of need, off the commit path.

Creating a file costs 0.02-0.6 ms of kernel CPU on this kind of machine (it varies over minutes), and
every local commit creates at least two: its Parquet file and the temporary file its log entry is linked
from. Profiles of Kafka ProducerPerformance put those creates at about a third of the flusher's time. So
one background thread per process keeps a few empty files ready in each directory a committer asked for,
and the committer writes into one (an open without create or truncate, ~2 us) instead of creating it.

A spare is an empty, unreferenced file: Delta readers never see it, vacuum may delete it (a committer then
finds it gone and creates its file itself), and a crash leaves at most ``PER_DIRECTORY`` of them per
directory. Spares older than ``MAX_AGE_S`` are not handed out: a vacuum with a short retention could
delete one between the moment it is opened and the commit that references it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
import uuid

logger = logging.getLogger(__name__)

PER_DIRECTORY = 4
MAX_AGE_S = 30.0


class SpareFiles:
    """Spare empty files per (directory, prefix, suffix); see the module docs."""

    def __init__(self, per_directory: int = PER_DIRECTORY) -> None:
        self._per = per_directory
        self._free: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._asleep = False  # the thread waits for a take; the first take after that wakes it
        self.created = 0
        self.wakeups = 0

    def take(self, folder: str, prefix: str, suffix: str) -> str | None:
        """A spare's path in ``folder`` named ``<prefix><uuid><suffix>``, or None (create one yourself)."""
        key = (folder, prefix, suffix)
        now = time.monotonic()
        with self._cond:
            free = self._free.setdefault(key, [])
            self._wake()
            while free:
                path, made = free.pop()
                if now - made <= MAX_AGE_S:
                    return path
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="spare-files", daemon=True)
                self._thread.start()
        return None

    def _wake(self) -> None:
        """Wake the thread if it sleeps (the caller holds the lock). A commit over many partitions takes
        a spare in each of their folders: one wake-up for all of them, not one per take (each a GIL
        hand-off to a thread that would refill one folder and sleep again; a 12-partition commit took 13)."""
        if self._asleep:
            self._asleep = False
            self.wakeups += 1
            self._cond.notify()

    def forget(self, folder_prefix: str) -> None:
        """Delete the spares below ``folder_prefix`` (a table being closed or deleted)."""
        with self._cond:
            for key in [k for k in self._free if k[0].startswith(folder_prefix)]:
                for path, _made in self._free.pop(key):
                    with contextlib.suppress(OSError):
                        os.unlink(path)

    def _run(self) -> None:
        while True:
            with self._cond:
                wanted = [k for k, v in self._free.items() if len(v) < self._per]
                if not wanted:
                    self._asleep = True
                    self._cond.wait(1.0)
                    self._asleep = False
                    continue
            for key in wanted:
                folder, prefix, suffix = key
                path = os.path.join(folder, f"{prefix}{uuid.uuid4()}{suffix}")
                try:
                    _create_empty(path)
                except OSError:  # the directory is gone (topic deleted): stop serving it
                    with self._cond:
                        self._free.pop(key, None)
                    continue
                self.created += 1
                with self._cond:
                    if key in self._free:
                        self._free[key].append((path, time.monotonic()))
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(path)


def _create_empty(path: str) -> None:
    """Create the empty file ``path`` (fails if it exists): one ``mknod``, not an open and a close.

    Each system call releases and re-takes the GIL, each re-take a wait behind the event loop: a commit
    over 12 partitions takes 13 spares, and this thread makes them anew while the next commit's requests
    are parsed. Where ``mknod`` of a regular file is refused, an exclusive open and close."""
    try:
        os.mknod(path, 0o644 | stat.S_IFREG)
    except PermissionError:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


#: The process's spare files (one thread, started on first use).
SPARES = SpareFiles()


def write_new(folder: str, prefix: str, suffix: str, data: bytes | memoryview) -> str:
    """Write ``data`` as a new file in ``folder`` named ``<prefix><uuid><suffix>`` (a spare when one is
    ready) and return its path."""
    path = SPARES.take(folder, prefix, suffix)
    if path is not None:
        try:
            # no O_TRUNC: a spare is empty, and on ext4 a truncate-to-empty makes the close start
            # writeback (auto_da_alloc): 15-25 us a file here, against 1 us
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:  # vacuumed meanwhile
            path = None
    if path is None:
        path = os.path.join(folder, f"{prefix}{uuid.uuid4()}{suffix}")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        # a spare is empty and ours alone (a random name, created with O_EXCL by this process, handed
        # out once): no size check after writing, one syscall less (each a GIL hand-off)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
    return path
