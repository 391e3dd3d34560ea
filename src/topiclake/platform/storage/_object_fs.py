"""Object-store file operations delta-rs's Python handler does not offer under a public name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from deltalake.fs import DeltaStorageHandler


def delete_prefix(uri: str, options: Mapping[str, str]) -> None:
    """Delete every object below ``uri`` (a table directory), not siblings that share its name as prefix.

    ``DeltaStorageHandler.delete_root_dir_contents`` calls a method deltalake 1.6's native handler lacks;
    its ``delete_dir`` of the root does the job (checked against an S3 API server).

    Raises:
        OSError: The store refused or could not be reached.
    """
    DeltaStorageHandler(uri, dict(options))._handler.delete_dir("")


class _BytesWriter:
    """delta-rs's output stream takes ``bytes`` only; pyarrow's ``PyFileSystem`` hands it ``Buffer``s."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, data: Any) -> Any:
        return self._raw.write(bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class ObjectStoreHandler(DeltaStorageHandler):
    """delta-rs's pyarrow filesystem handler, with output streams that accept what pyarrow writes.

    Without it, writing a small file (a lease) on an object store through ``pafs.PyFileSystem`` fails with
    "'Buffer' object is not an instance of 'bytes'" (deltalake 1.6.6).
    """

    def open_output_stream(self, path: str, metadata: dict[str, str] | None = None) -> pa.PythonFile:
        return pa.PythonFile(_BytesWriter(self._handler.open_output_stream(path, metadata)), mode="w")
