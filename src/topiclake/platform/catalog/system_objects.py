"""Small objects in one ``_system/`` folder, and version markers: what a cluster watches between beats.

Brokers watch ``_system/brokers/`` (:mod:`topiclake.platform.cluster.membership`). On object storage every
request is billed and takes a round trip, so each operation here is one request where the store allows:
a LIST of the folder (names, sizes, modification times), a PUT of a small object (signed here when the
warehouse has static S3 keys: delta-rs's filesystem handler uploads every object in three multipart
requests), a GET, a DELETE. On a local disk a PUT writes aside and renames, so a reader never sees half a
file.

A *version marker* is an empty object whose name carries a version, ``_<kind>.<version>`` (``_catalog.12``,
``_state.40``): written after the commit of that version of a table, it lets a watcher that lists the folder
anyway tell whether the table moved without asking the table (one LIST of its ``_delta_log`` per table per
beat otherwise). Markers are hints, never fences: a marker that was not written (its writer died between
commit and marker) only delays what a watcher learns; the Delta ``txn`` fences decide who may commit.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from topiclake.platform.storage import Storage
from topiclake.platform.storage.s3_client import S3Client, s3_location

logger = logging.getLogger(__name__)

#: The folder brokers heartbeat into and watch; version markers live there too (one LIST sees all).
BROKERS_DIR = "_system/brokers"

_MARKER = re.compile(r"^_([a-z]+)\.(\d+)$")


@dataclass(frozen=True)
class Listed:
    """One object of a listing: its name in the folder, size and modification time (ns since the epoch;
    object stores keep whole seconds or milliseconds)."""

    name: str
    size: int
    mtime_ns: int


def marker_name(kind: str, version: int) -> str:
    """The name of the marker of ``version`` of ``kind`` (``_state.40``)."""
    return f"_{kind}.{version}"


def parse_marker(name: str) -> tuple[str, int] | None:
    """``(kind, version)`` of a marker's name, or None for any other object."""
    m = _MARKER.match(name)
    return None if m is None else (m.group(1), int(m.group(2)))


def newest_markers(listing: list[Listed]) -> dict[str, int]:
    """The highest version of each kind of marker in a listing."""
    out: dict[str, int] = {}
    for item in listing:
        parsed = parse_marker(item.name)
        if parsed is not None and parsed[1] > out.get(parsed[0], -1):
            out[parsed[0]] = parsed[1]
    return out


class SystemObjects:
    """The small objects of one folder of the warehouse, one request per operation where possible.

    Args:
        storage: The warehouse.
        directory: The folder, relative to the warehouse root (``_system/brokers``).
        deadline_s: How long a signed S3 request keeps retrying (a heartbeat is useless after the session
            timeout).
    """

    def __init__(self, storage: Storage, directory: str = BROKERS_DIR, deadline_s: float = 10.0) -> None:
        self.directory = directory
        self.is_local = storage.is_local
        self._fs = storage.filesystem(storage.root)
        self._client: S3Client | None = None
        if not storage.is_local:
            location = s3_location(storage.root, storage.options() or {})
            if location is not None:
                self._client = S3Client(location, deadline_s=deadline_s, timeout_s=min(10.0, deadline_s))

    def close(self) -> None:
        """Close pooled connections."""
        if self._client is not None:
            self._client.close()

    def _path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def list(self) -> list[Listed]:
        """Every object of the folder (one LIST on an object store).

        Raises:
            OSError: The store cannot be reached.
        """
        infos = self._fs.get_file_info(pafs.FileSelector(self.directory, allow_not_found=True))
        return [
            Listed(i.base_name, int(i.size or 0), int(i.mtime_ns or 0))
            for i in infos
            if i.type == pafs.FileType.File
        ]

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` as ``name`` (replacing it).

        Raises:
            OSError: The store refused it or cannot be reached.
        """
        if self._client is not None:
            self._client.put(self._path(name), data)
            return
        if self.is_local:  # write aside, then rename: a reader never sees half a file
            self._fs.create_dir(self.directory, recursive=True)
            tmp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
            with self._fs.open_output_stream(tmp) as fh:
                fh.write(data)
            self._fs.move(tmp, self._path(name))
        else:
            with self._fs.open_output_stream(self._path(name)) as fh:
                fh.write(data)

    def get(self, name: str) -> bytes | None:
        """The object's bytes, or None if it is not there (or cannot be read now)."""
        try:
            if self._client is not None:
                return self._client.get(self._path(name))
            with self._fs.open_input_stream(self._path(name)) as fh:
                data: bytes = fh.read()
                return data
        except OSError:
            return None

    def delete(self, name: str) -> None:
        """Delete the object if it is there (errors are ignored: the next writer tidies again)."""
        with contextlib.suppress(OSError):
            self._fs.delete_file(self._path(name))


class VersionMarker:
    """Publishes ``_<kind>.<version>`` markers of one table into a folder after its commits.

    Each publish writes the new marker, then deletes the markers of lower versions this writer wrote or
    was told of (:meth:`forget_below`): the folder holds a marker or two per kind, not one per version.

    Args:
        objects: The folder.
        kind: The marker's kind (``catalog``, ``state``).
    """

    def __init__(self, objects: SystemObjects, kind: str) -> None:
        self._objects = objects
        self.kind = kind
        self.published = -1  # the highest version this writer has published
        self._stale: set[int] = set()

    def publish(self, version: int) -> bool:
        """Write the marker of ``version`` (never lower than one already published); False if the store
        refused it (the caller retries later: a missing marker only delays watchers)."""
        if version <= self.published:
            return True
        try:
            self._objects.put(marker_name(self.kind, version), b"")
        except OSError as exc:
            logger.warning("cannot write the %s marker of version %d: %s", self.kind, version, exc)
            return False
        if self.published >= 0:
            self._stale.add(self.published)
        self.published = version
        for old in sorted(self._stale):
            self._objects.delete(marker_name(self.kind, old))
        self._stale.clear()
        return True

    def forget_below(self, listing: list[Listed], version: int) -> None:
        """Delete the markers of this kind below ``version`` seen in ``listing`` (left by other writers,
        some of them dead)."""
        for item in listing:
            parsed = parse_marker(item.name)
            if parsed is not None and parsed[0] == self.kind and parsed[1] < version:
                self._objects.delete(item.name)
