"""Log leases: a reader that needs a topic table's Delta log to stay whole says so, for a while.

Brokers delete Delta log entries older than a short window (``log_retention_ms``) to keep commits fast.
A Spark job reading a topic beside a live broker needs every log entry from its read version on, for its
snapshot and for its commit's conflict check. It takes a lease:

```python
with LogLease(storage, "orders", holder="compaction-job"):
    ...  # run the job
```

A lease is a small JSON file ``_system/leases/<topic>/<id>.json`` holding its expiry time; the holder
renews it in a background thread while it runs, so a crashed holder stops protecting the log once its
lease expires (``ttl_s`` after the last renewal). While any lease on a topic is unexpired, the
maintenance thread still writes checkpoints but deletes no log entry.

A lease of kind ``write`` is a writer's intent: a writer outside the gateway (Spark's sink, reprocessing)
whose commits keep losing the race against a busy gateway's group commits takes one, and the gateway holds
its own commits of that topic while it is active (at most :data:`WRITE_INTENT_MAX_S` per hold), so the
writer gets its turn (:mod:`topiclake.platform.log.topic_writer`).

A lease of kind ``rewrite`` is a maintenance job's (Spark compaction, key compaction, retention): it also
holds the log whole, and the brokers' own compaction leaves the topic alone while it is active. Without it
a broker's compaction, which commits in a millisecond, rewrites the active segment again and again while a
Spark rewrite of the same segment takes seconds, and the job loses every retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from types import TracebackType
from typing import Literal

import pyarrow.fs as pafs

from topiclake.platform.storage.warehouse import Storage

logger = logging.getLogger(__name__)

#: What a lease is for: hold the log whole (a reader), a writer's intent, or a maintenance job's rewrite.
LeaseKind = Literal["log", "write", "rewrite"]


def _lease_dir(topic: str) -> str:
    return f"_system/leases/{topic}"


#: How long a lease file that cannot be read (being written or removed, or left half-written by a crash)
#: holds the log after it was last modified, in seconds.
UNREADABLE_TTL_S = 60.0

#: Longest a gateway holds its commits for other writers' intents, in seconds.
WRITE_INTENT_MAX_S = 5.0


def active_leases(
    storage: Storage, topic: str, now: float | None = None, kind: LeaseKind | None = None
) -> list[dict[str, object]]:
    """The unexpired leases on a topic's log (expired ones are ignored, not deleted); of one ``kind`` if
    given (``log``, ``write`` or ``rewrite``)."""
    fs = storage.filesystem(storage.root)
    now = time.time() if now is None else now
    try:
        infos = fs.get_file_info(pafs.FileSelector(_lease_dir(topic), allow_not_found=True))
    except OSError:
        return []
    leases = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.path.endswith(".json"):
            continue
        try:
            with fs.open_input_stream(info.path) as fh:
                lease = json.loads(fh.read())
        except (OSError, ValueError):
            # being written or removed right now: while it is fresh it holds the log (and compaction) as a
            # whole lease would -- a reader must never lose its log in the instant of a renewal; a file that
            # stays unreadable (a holder that crashed mid-write) expires like a lease
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            lease = {"holder": "unreadable", "path": info.path, "expires": mtime + UNREADABLE_TTL_S}
            lease["kind"] = kind or "log"
        if float(lease.get("expires", 0)) > now and (kind is None or lease.get("kind", "log") == kind):
            leases.append(lease)
    return leases


class LogLease:
    """Hold a topic table's Delta log whole while a reader runs (see the module docstring).

    Args:
        storage: The warehouse.
        topic: The topic whose log must stay.
        holder: Who holds it (shown in logs and in the lease file).
        ttl_s: How long the lease lasts without renewal; it is renewed every ``ttl_s / 3``.
        kind: ``log`` (hold the Delta log whole), ``write`` (a writer's intent) or ``rewrite`` (a maintenance
            job's: brokers hold their own compaction of the topic); every kind also holds the log.
    """

    def __init__(
        self,
        storage: Storage,
        topic: str,
        holder: str = "reader",
        ttl_s: float = 60.0,
        kind: LeaseKind = "log",
    ) -> None:
        self._fs = storage.filesystem(storage.root)
        self._local = storage.is_local
        self.topic = topic
        self.holder = holder
        self.ttl_s = ttl_s
        self.kind = kind
        self.path = f"{_lease_dir(topic)}/{uuid.uuid4().hex}.json"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{topic}", daemon=True)

    def _write(self) -> None:
        expires = time.time() + self.ttl_s
        body = {"topic": self.topic, "holder": self.holder, "kind": self.kind, "expires": expires}
        self._fs.create_dir(_lease_dir(self.topic), recursive=True)
        if not self._local:  # an object PUT replaces the lease whole
            with self._fs.open_output_stream(self.path) as fh:
                fh.write(json.dumps(body).encode())
            return
        # a local file is truncated, then written: renew by a rename, so no reader sees it empty
        tmp = f"{self.path}.{uuid.uuid4().hex[:8]}.tmp"
        with self._fs.open_output_stream(tmp) as fh:
            fh.write(json.dumps(body).encode())
        self._fs.move(tmp, self.path)

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._write()
            except OSError as exc:  # the lease lapses at its expiry; say so
                logger.warning("topic %s: cannot renew log lease %s: %s", self.topic, self.path, exc)

    def acquire(self) -> LogLease:
        """Write the lease and start renewing it."""
        self._write()
        self._thread.start()
        logger.info("topic %s: log lease taken by %s", self.topic, self.holder)
        return self

    def release(self) -> None:
        """Stop renewing and remove the lease."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with contextlib.suppress(OSError):  # already gone: nothing to release
            self._fs.delete_file(self.path)
        logger.info("topic %s: log lease released by %s", self.topic, self.holder)

    def __enter__(self) -> LogLease:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
