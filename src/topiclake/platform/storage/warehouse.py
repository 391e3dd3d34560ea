"""Where the warehouse lives: a local directory or an object store, reached by URI and storage options.

The rest of the platform never builds paths by hand: it asks :class:`Storage` for table URIs and for a
pyarrow filesystem to read data files with.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs
from deltalake import DeltaTable

from topiclake.errors import StorageError
from topiclake.platform.storage._access import check_access, check_endpoint
from topiclake.platform.storage._commit_safety import check_options, verify_conditional_put
from topiclake.platform.storage._object_fs import ObjectStoreHandler, delete_prefix

logger = logging.getLogger(__name__)

_REMOTE_SCHEMES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure", "memory"}


def _normalize_root(uri: str) -> tuple[str, bool]:
    parsed = urlparse(uri)
    if parsed.scheme in _REMOTE_SCHEMES:
        return uri.rstrip("/"), False
    if parsed.scheme == "file":
        return str(Path(parsed.path).resolve()), True
    if parsed.scheme and len(parsed.scheme) > 1:
        raise StorageError(
            f"unsupported warehouse URI scheme {parsed.scheme!r}: use a local path, file://, s3://, "
            "gs:// or abfss://",
            uri=uri,
        )
    return str(Path(uri).expanduser().resolve()), True


class Storage:
    """A warehouse root plus the options needed to reach it.

    Args:
        uri: Local path, ``file://`` URI, or object-store URI (``s3://bucket/prefix``, ``abfss://...``).
        storage_options: Options passed to delta-rs (credentials, endpoint, region, ...).
        fsync: On a local warehouse, fsync each new data file and log entry (delta-rs does not), so an
            acknowledged commit survives an OS crash, not only a process crash. Refused on object stores,
            where a commit is durable once the store acknowledged it.

    Raises:
        StorageError: An unsupported scheme, or settings that cannot hold there (fsync on an object store,
            conditional put disabled on S3).
    """

    def __init__(
        self, uri: str, storage_options: Mapping[str, str] | None = None, *, fsync: bool = False
    ) -> None:
        self.root, self.is_local = _normalize_root(uri)
        self.storage_options: dict[str, str] = dict(storage_options or {})
        check_options(self.root, self.storage_options, fsync=fsync, is_local=self.is_local)
        check_endpoint(self.root, self.storage_options)
        self.fsync = fsync
        if self.is_local:
            Path(self.root).mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    def uri(self, *parts: str) -> str:
        """Return the URI of a path below the warehouse root."""
        return "/".join([self.root, *parts])

    def topic_uri(self, topic: str) -> str:
        """Return the URI of a topic's table (the name must already be validated)."""
        return self.uri("topics", topic)

    def system_uri(self, name: str) -> str:
        """Return the URI of a system table such as ``topics`` or ``consumer_offsets``."""
        return self.uri("_system", name)

    def options(self) -> dict[str, str] | None:
        """Return storage options for delta-rs, or None when there are none."""
        return self.storage_options or None

    def check_access(self) -> None:
        """Ask the store once whether the warehouse can be used (S3 with an endpoint and keys): one signed
        HEAD of the bucket. Entry points call it first, so a wrong endpoint, bucket or key is one line.

        Raises:
            StorageError: The store is unreachable, the bucket missing or access refused.
        """
        check_access(self.root, self.storage_options)

    def verify_commit_safety(self) -> bool:
        """Check once per process and bucket that the store keeps concurrent commits apart (for writers).

        On S3 a probe checks that the store honours ``If-None-Match``; other stores need nothing.
        Returns False only when it does not and the user accepted that (``AWS_S3_ALLOW_UNSAFE_RENAME``).

        Raises:
            StorageError: The store cannot keep two writers apart and the user did not accept it.
        """
        return verify_conditional_put(self.root, self.storage_options)

    def is_table(self, uri: str) -> bool:
        """Whether a Delta table exists at ``uri``."""
        try:
            return bool(DeltaTable.is_deltatable(uri, storage_options=self.options()))
        except OSError as exc:
            raise StorageError(f"cannot reach {uri}: {exc}", uri=uri) from exc

    def filesystem(self, table_uri: str) -> pafs.FileSystem:
        """Return a pyarrow filesystem rooted at ``table_uri``, for reading the table's data files."""
        if self.is_local:
            return pafs.SubTreeFileSystem(table_uri, pafs.LocalFileSystem())
        return pafs.PyFileSystem(ObjectStoreHandler(table_uri, self.storage_options))

    def delete_tree(self, uri: str) -> None:
        """Delete everything below ``uri`` (a table directory)."""
        try:
            if self.is_local:
                shutil.rmtree(uri, ignore_errors=True)
            else:
                delete_prefix(uri, self.storage_options)
        except OSError as exc:
            raise StorageError(f"cannot delete {uri}: {exc}", uri=uri) from exc
        logger.info("deleted %s", uri)

    def sync_commit(self, table_uri: str, version: int) -> None:
        """fsync the log entry of commit ``version`` and the data files it adds (no-op unless enabled)."""
        if not self.fsync:
            return
        log_dir = os.path.join(table_uri, "_delta_log")
        entry = os.path.join(log_dir, f"{version:020d}.json")
        dirs = {log_dir}
        paths = [entry]
        with open(entry, "rb") as fh:
            for line in fh:
                action = json.loads(line)
                if "add" in action:
                    path = os.path.join(table_uri, unquote(action["add"]["path"]))
                    paths.append(path)
                    dirs.add(os.path.dirname(path))
        for path in [*paths, *dirs]:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
