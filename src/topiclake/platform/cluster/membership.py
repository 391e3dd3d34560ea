"""Broker membership: each broker heartbeats a small file into the warehouse; others watch them.

``_system/brokers/<id>.json`` holds the broker's id, a random incarnation, its advertised listeners, its
rack and a sequence number that grows with every heartbeat. A watcher judges liveness on its own monotonic
clock: a broker is alive while its sequence keeps moving, dead once it has not moved for the session
timeout (or once its file is gone: a broker that shuts down cleanly deletes it). Only the first sighting
of a file uses the writer's wall-clock time, to tell a stale file from a fresh one. Safety never rests on
these timeouts: they decide liveness, the Delta fences decide who may commit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from topiclake.errors import BrokerIdInUse, StorageError
from topiclake.platform.cluster.metadata import BrokerEndpoint, Endpoint
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

BROKERS_DIR = "_system/brokers"


@dataclass
class _Seen:
    incarnation: str
    seq: int
    changed: float  # monotonic time the sequence last moved
    since: float  # monotonic time this incarnation was first seen alive
    endpoint: BrokerEndpoint


def _endpoint(doc: dict[str, Any]) -> BrokerEndpoint:
    listeners = tuple(
        Endpoint(str(e["name"]), str(e["host"]), int(e["port"])) for e in doc.get("listeners", [])
    )
    http = next((e for e in listeners if e.name == "http"), Endpoint("http", "127.0.0.1", 0))
    rack = doc.get("rack")
    return BrokerEndpoint(
        int(doc["broker_id"]), http.host, http.port, None if rack is None else str(rack), listeners
    )


class Membership:
    """Writes this broker's heartbeat and keeps a view of every broker's liveness.

    Args:
        storage: The warehouse.
        broker_id: This broker's id.
        session_timeout_ms: A broker whose heartbeat has not moved this long is dead.
    """

    def __init__(self, storage: Storage, broker_id: int, session_timeout_ms: int) -> None:
        self._fs = storage.filesystem(storage.root)
        self._local = storage.is_local
        self.broker_id = broker_id
        self.session_timeout_s = session_timeout_ms / 1000
        self.incarnation = uuid.uuid4().hex
        self._seq = 0
        self._seen: dict[int, _Seen] = {}
        self._path = f"{BROKERS_DIR}/{broker_id}.json"
        self.last_beat = 0.0  # monotonic time of the last heartbeat that reached the warehouse

    # ------------------------------------------------------------------ this broker

    def register(self, endpoint: BrokerEndpoint, wait_s: float) -> None:
        """Claim this broker id: refuse it while another live broker heartbeats under it.

        A heartbeat file of the same id that looks fresh is watched for up to ``wait_s``: if its sequence
        moves, a live broker holds the id; if not, it was left by a broker that died.

        Raises:
            BrokerIdInUse: Another live broker holds the id.
        """
        self.check_free(wait_s)
        self.beat(endpoint)
        logger.info("broker %d registered in the cluster (incarnation %s)", self.broker_id, self.incarnation)

    def check_free(self, wait_s: float) -> None:
        """Raise BrokerIdInUse if a live broker heartbeats under this id (see :meth:`register`)."""
        doc = self._read(self._path)
        if doc is not None and doc.get("incarnation") != self.incarnation:
            age = time.time() - float(doc.get("time", 0))
            if _is_local_dead_process(doc):
                age = float("inf")
            if age < self.session_timeout_s:
                seq = doc.get("seq")
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline:
                    time.sleep(0.1)
                    now_doc = self._read(self._path)
                    if now_doc is None:
                        break
                    if now_doc.get("seq") != seq or now_doc.get("incarnation") != doc.get("incarnation"):
                        host = now_doc.get("hostname")
                        raise BrokerIdInUse(
                            f"broker id {self.broker_id} is held by a live broker (pid {now_doc.get('pid')} "
                            f"on {host}, listeners {now_doc.get('listeners')}); give this broker another "
                            "--broker-id",
                            broker_id=self.broker_id,
                        )

    def beat(self, endpoint: BrokerEndpoint) -> None:
        """Write one heartbeat (raises StorageError if the warehouse cannot be reached)."""
        self._seq += 1
        doc = {
            "broker_id": self.broker_id,
            "incarnation": self.incarnation,
            "seq": self._seq,
            "time": time.time(),
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "rack": endpoint.rack,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in endpoint.listeners],
        }
        data = json.dumps(doc).encode()
        try:
            self._fs.create_dir(BROKERS_DIR, recursive=True)
            if self._local:  # write aside, then rename: a reader never sees half a file
                tmp = f"{BROKERS_DIR}/.{self.broker_id}.{self.incarnation}.tmp"
                with self._fs.open_output_stream(tmp) as fh:
                    fh.write(data)
                self._fs.move(tmp, self._path)
            else:
                with self._fs.open_output_stream(self._path) as fh:
                    fh.write(data)
        except OSError as exc:
            raise StorageError(f"broker {self.broker_id}: cannot write heartbeat: {exc}") from exc
        self.last_beat = time.monotonic()

    def deregister(self) -> None:
        """Remove this broker's heartbeat (a clean shutdown: others see it gone at once)."""
        doc = self._read(self._path)
        if doc is not None and doc.get("incarnation") == self.incarnation:
            with contextlib.suppress(OSError):
                self._fs.delete_file(self._path)
        logger.info("broker %d left the cluster", self.broker_id)

    # ------------------------------------------------------------------ the others

    def scan(self) -> dict[int, BrokerEndpoint]:
        """Read every heartbeat; return the live brokers by id."""
        now = time.monotonic()
        wall = time.time()
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(BROKERS_DIR, allow_not_found=True))
        except OSError as exc:
            raise StorageError(f"cannot list broker heartbeats: {exc}") from exc
        present: set[int] = set()
        for info in infos:
            name = info.base_name
            if not name.endswith(".json") or name.startswith("."):
                continue
            doc = self._read(info.path)
            if doc is None:
                continue
            bid = int(doc["broker_id"])
            present.add(bid)
            inc, seq = str(doc.get("incarnation")), int(doc.get("seq", 0))
            seen = self._seen.get(bid)
            if seen is None or seen.incarnation != inc:
                age = max(0.0, wall - float(doc.get("time", 0)))
                if _is_local_dead_process(doc):
                    age = float("inf")
                changed = now - min(age, 10 * self.session_timeout_s)
                self._seen[bid] = _Seen(inc, seq, changed, changed, _endpoint(doc))
            elif seen.seq != seq:
                seen.seq, seen.changed, seen.endpoint = seq, now, _endpoint(doc)
        for bid in list(self._seen):
            if bid not in present:
                del self._seen[bid]
        return {
            bid: s.endpoint
            for bid, s in sorted(self._seen.items())
            if now - s.changed < self.session_timeout_s
        }

    def alive_for(self, broker_id: int) -> float:
        """Seconds this incarnation of a broker has been seen alive (0 if not seen)."""
        seen = self._seen.get(broker_id)
        return 0.0 if seen is None else max(0.0, time.monotonic() - seen.since)

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with self._fs.open_input_stream(path) as fh:
                doc = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and "broker_id" in doc else None


def _is_local_dead_process(doc: dict[str, Any]) -> bool:
    """Whether the heartbeat was written by a process of this host that no longer runs (a quick verdict
    for a broker restarted on the same machine after kill -9)."""
    if doc.get("hostname") != socket.gethostname():
        return False
    try:
        os.kill(int(doc["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, KeyError, ValueError, TypeError):
        return False
    return False
