"""Object-store file operations delta-rs's Python handler does not offer under a public name."""

from __future__ import annotations

from collections.abc import Mapping

from deltalake.fs import DeltaStorageHandler


def delete_prefix(uri: str, options: Mapping[str, str]) -> None:
    """Delete every object below ``uri`` (a table directory), not siblings that share its name as prefix.

    ``DeltaStorageHandler.delete_root_dir_contents`` calls a method deltalake 1.6's native handler lacks;
    its ``delete_dir`` of the root does the job (checked against an S3 API server).

    Raises:
        OSError: The store refused or could not be reached.
    """
    DeltaStorageHandler(uri, dict(options))._handler.delete_dir("")
