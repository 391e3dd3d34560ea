"""Broker membership: each broker heartbeats a small file into the warehouse; others watch them.

``_system/brokers/<id>.json`` holds the broker's id, a random incarnation, its advertised listeners, its rack
and a sequence number that grows with every heartbeat. A watcher lists the folder (one LIST on an object
store) and judges liveness on its own monotonic clock: a broker is alive while its file keeps changing (its
modification time or size moves with every heartbeat), dead once it has not changed for the session timeout
(or once its file is gone: a broker that shuts down cleanly deletes it). A watcher reads a broker's file only
when it first sees it, or when that broker's marker ``_incarnation.<id>.<incarnation>.<n>`` names something it
has not read: a broker writes it when it registers (``n`` 0) and again, with ``n + 1``, each time what it
advertises changes (a listener started after it joined, as the Kafka listener is), after the heartbeat that
carries the change. That is where a watcher learns the broker's listeners, and the first sighting uses the
writer's wall-clock time to tell a stale file from a fresh one. Version markers of the cluster's tables share
the folder, so the same listing tells whether they moved (:mod:`topiclake.platform.catalog.system_objects`).
Safety never rests on these timeouts: they decide liveness, the Delta fences decide who may commit.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from topiclake.errors import BrokerIdInUse, StorageError
from topiclake.platform.catalog.system_objects import BROKERS_DIR, Listed, SystemObjects, newest_markers
from topiclake.platform.cluster.metadata import BrokerEndpoint, Endpoint
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

__all__ = ["BROKERS_DIR", "Membership"]

_INCARNATION = "_incarnation."


@dataclass
class _Seen:
    incarnation: str
    key: tuple[int, int]  # (mtime_ns, size) of the heartbeat file when last looked at
    changed: float  # monotonic time the file last changed
    since: float  # monotonic time this incarnation was first seen alive
    endpoint: BrokerEndpoint
    marker: str | None  # the incarnation marker the file was last read under


def _endpoint(doc: dict[str, Any]) -> BrokerEndpoint:
    listeners = tuple(
        Endpoint(str(e["name"]), str(e["host"]), int(e["port"])) for e in doc.get("listeners", [])
    )
    http = next((e for e in listeners if e.name == "http"), Endpoint("http", "127.0.0.1", 0))
    rack = doc.get("rack")
    return BrokerEndpoint(
        int(doc["broker_id"]), http.host, http.port, None if rack is None else str(rack), listeners
    )


def _incarnations(listing: list[Listed]) -> dict[int, str]:
    """The newest incarnation marker of each broker id in a listing (by modification time, then by the
    advertisement's number: an object store may keep whole seconds)."""
    newest: dict[int, tuple[int, int, str]] = {}
    for item in listing:
        if not item.name.startswith(_INCARNATION):
            continue
        bid, _, rest = item.name[len(_INCARNATION) :].partition(".")
        gen = rest.rpartition(".")[2]
        if bid.isdigit():
            key = (item.mtime_ns, int(gen) if gen.isdigit() else -1, item.name)
            old = newest.get(int(bid))
            if old is None or key > old:
                newest[int(bid)] = key
    return {bid: key[2] for bid, key in newest.items()}


class Membership:
    """Writes this broker's heartbeat and keeps a view of every broker's liveness.

    Args:
        storage: The warehouse.
        broker_id: This broker's id.
        session_timeout_ms: A broker whose heartbeat has not moved this long is dead.
        heartbeat_interval_ms: This broker's heartbeat interval (written into its file, so that a broker
            claiming the same id knows how long to watch it).
    """

    def __init__(
        self, storage: Storage, broker_id: int, session_timeout_ms: int, heartbeat_interval_ms: int = 2_000
    ) -> None:
        self.broker_id = broker_id
        self.session_timeout_s = session_timeout_ms / 1000
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.objects = SystemObjects(storage, BROKERS_DIR, deadline_s=max(1.0, self.session_timeout_s))
        self.incarnation = uuid.uuid4().hex
        self._seq = 0
        self._seen: dict[int, _Seen] = {}
        self._name = f"{broker_id}.json"
        self._marker = f"{_INCARNATION}{broker_id}.{self.incarnation}.0"
        self._advertised: BrokerEndpoint | None = None  # what the marker's heartbeat advertised
        self._advertisements = 0
        self.last_beat = 0.0  # monotonic time of the last heartbeat that reached the warehouse
        self.listing: list[Listed] = []  # the folder as the last scan listed it
        self.markers: dict[str, int] = {}  # the newest version marker of each kind in that listing

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
        try:
            self.objects.put(self._marker, b"")
            self._advertised = endpoint
            for item in self.objects.list():  # markers of this id's earlier incarnations
                if item.name.startswith(f"{_INCARNATION}{self.broker_id}.") and item.name != self._marker:
                    self.objects.delete(item.name)
        except OSError as exc:
            raise StorageError(f"broker {self.broker_id}: cannot register: {exc}") from exc
        logger.info("broker %d registered in the cluster (incarnation %s)", self.broker_id, self.incarnation)

    def check_free(self, wait_s: float) -> None:
        """Raise BrokerIdInUse if a live broker heartbeats under this id (see :meth:`register`)."""
        doc = self._read(self._name)
        if doc is not None and doc.get("incarnation") != self.incarnation:
            age = time.time() - float(doc.get("time", 0))
            if _is_local_dead_process(doc):
                age = float("inf")
            if age < self.session_timeout_s:
                seq = doc.get("seq")
                wait_s = max(wait_s, 2.5 * float(doc.get("interval_ms", 0)) / 1000)
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline:
                    time.sleep(0.1 if self.objects.is_local else 0.5)
                    now_doc = self._read(self._name)
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
            "interval_ms": self.heartbeat_interval_ms,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "rack": endpoint.rack,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in endpoint.listeners],
        }
        data = json.dumps(doc).encode()
        if len(data) % 2 != self._seq % 2:
            # the size's parity alternates with each beat: a watcher's listing sees the file change even
            # where the store keeps modification times in whole seconds
            data += b" "
        try:
            self.objects.put(self._name, data)
        except OSError as exc:
            raise StorageError(f"broker {self.broker_id}: cannot write heartbeat: {exc}") from exc
        self.last_beat = time.monotonic()
        if self._advertised is not None and self._advertised != endpoint:
            self._readvertise(endpoint)

    def _readvertise(self, endpoint: BrokerEndpoint) -> None:
        """Tell watchers to read this broker's file again: it advertises something new (a listener that
        started after the broker joined). A marker the store refused is written at the next beat."""
        self._advertisements += 1
        marker = f"{_INCARNATION}{self.broker_id}.{self.incarnation}.{self._advertisements}"
        try:
            self.objects.put(marker, b"")
        except OSError as exc:
            logger.warning("broker %d: cannot announce its new listeners: %s", self.broker_id, exc)
            return
        self.objects.delete(self._marker)
        self._marker, self._advertised = marker, endpoint
        logger.info("broker %d advertises %s", self.broker_id, [e.name for e in endpoint.listeners])

    def deregister(self) -> None:
        """Remove this broker's heartbeat (a clean shutdown: others see it gone at once)."""
        doc = self._read(self._name)
        if doc is not None and doc.get("incarnation") == self.incarnation:
            self.objects.delete(self._name)
        self.objects.delete(self._marker)
        self.objects.close()
        logger.info("broker %d left the cluster", self.broker_id)

    # ------------------------------------------------------------------ the others

    def scan(self) -> dict[int, BrokerEndpoint]:
        """List the folder; return the live brokers by id (reads only files new to this watcher)."""
        now = time.monotonic()
        try:
            listing = self.objects.list()
        except OSError as exc:
            raise StorageError(f"cannot list broker heartbeats: {exc}") from exc
        self.listing = listing
        self.markers = newest_markers(listing)
        incarnations = _incarnations(listing)
        present: set[int] = set()
        for item in listing:
            name = item.name
            if not name.endswith(".json") or name.startswith(".") or not name[:-5].isdigit():
                continue
            bid = int(name[:-5])
            key = (item.mtime_ns, item.size)
            marker = incarnations.get(bid)
            seen = self._seen.get(bid)
            if seen is not None and seen.marker == marker:
                present.add(bid)
                if seen.key != key:
                    seen.key, seen.changed = key, now
                continue
            doc = self._read(name)  # new to this watcher, or a new incarnation under its id
            if doc is None or int(doc["broker_id"]) != bid:
                continue
            present.add(bid)
            inc = str(doc.get("incarnation"))
            if seen is None or seen.incarnation != inc:
                age = max(0.0, time.time() - float(doc.get("time", 0)))
                if _is_local_dead_process(doc):
                    age = float("inf")
                changed = now - min(age, 10 * self.session_timeout_s)
                self._seen[bid] = _Seen(inc, key, changed, changed, _endpoint(doc), marker)
            else:
                seen.marker, seen.endpoint = marker, _endpoint(doc)
                if seen.key != key:
                    seen.key, seen.changed = key, now
        for bid in list(self._seen):
            if bid not in present:
                del self._seen[bid]
        return {
            bid: s.endpoint
            for bid, s in sorted(self._seen.items())
            if now - s.changed < self.session_timeout_s
        }

    def quiet_for(self, broker_id: int) -> float:
        """Seconds since a broker's heartbeat was last seen to change (0 if not seen)."""
        seen = self._seen.get(broker_id)
        return 0.0 if seen is None else max(0.0, time.monotonic() - seen.changed)

    def alive_for(self, broker_id: int) -> float:
        """Seconds this incarnation of a broker has been seen alive (0 if not seen)."""
        seen = self._seen.get(broker_id)
        return 0.0 if seen is None else max(0.0, time.monotonic() - seen.since)

    def _read(self, name: str) -> dict[str, Any] | None:
        data = self.objects.get(name)
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except ValueError:
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
