"""Azurite, Microsoft's Azure Storage emulator, as a subprocess on 127.0.0.1 (tests and benchmarks).

``make tools-azurite`` installs it (npm, pinned by tools/azurite/package-lock.json) into
tools/azurite/node_modules; :func:`azurite_binary` finds it there, or at ``TOPICLAKE_AZURITE``. It serves
the well-known development account ``devstoreaccount1`` path-style (``http://127.0.0.1:<port>/devstoreaccount1``),
checks Shared Key signatures and honours ``If-None-Match: *`` (a second conditional PUT answers 409
BlobAlreadyExists, as Azure does). Blobs are kept in a temporary directory, telemetry is off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from topiclake.objectstore._proc import stop_process
from topiclake.platform.storage.sharedkey import (
    EMULATOR_ACCOUNT,
    EMULATOR_KEY,
    AzureLocation,
    signed_request,
)
from topiclake.process.ports import free_port

_READY = "successfully listens on "
_INSTALLED = (
    Path(__file__).resolve().parents[3] / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
)


def azurite_binary() -> str | None:
    """The ``azurite-blob`` executable, or None when it is not installed (``make tools-azurite``)."""
    configured = os.environ.get("TOPICLAKE_AZURITE")
    if configured:
        return configured
    if _INSTALLED.exists() and shutil.which("node") is not None:
        return str(_INSTALLED)
    return None


class AzuriteServer:
    """Azurite's blob service as a subprocess on 127.0.0.1, stopped by its pid.

    Args:
        binary: The ``azurite-blob`` executable (default: :func:`azurite_binary`).
    """

    account = EMULATOR_ACCOUNT
    key = EMULATOR_KEY

    def __init__(self, binary: str | None = None) -> None:
        self._binary = binary or azurite_binary()
        self._proc: subprocess.Popen[str] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.endpoint = ""  # http://127.0.0.1:<port>, the service; the account is its first path segment

    def start(self, timeout_s: float = 60.0) -> AzuriteServer:
        """Start Azurite and wait until it listens.

        Raises:
            RuntimeError: It is not installed or did not start.
        """
        if self._binary is None:
            raise RuntimeError("Azurite is not installed: run `make tools-azurite` (needs npm)")
        self._dir = tempfile.TemporaryDirectory(prefix="azurite-")
        port = free_port()
        args = [
            self._binary,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            self._dir.name,
        ]
        args += ["--silent", "--disableTelemetry", "--skipApiVersionCheck", "--loose"]
        log = Path(self._dir.name) / "azurite.log"
        with open(log, "w", encoding="utf-8") as out:  # a file, not a pipe nobody drains
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._proc.poll() is None:
            text = log.read_text(encoding="utf-8", errors="replace")
            if _READY in text:
                self.endpoint = text.split(_READY, 1)[1].split()[0].rstrip("/")
                return self
            time.sleep(0.1)
        text = log.read_text(encoding="utf-8", errors="replace")
        self.stop()
        raise RuntimeError(f"Azurite did not start: {text[-2000:]!r}")

    @property
    def pid(self) -> int:
        """Azurite's process id."""
        assert self._proc is not None
        return self._proc.pid

    def options(self, endpoint: str | None = None) -> dict[str, str]:
        """delta-rs storage options for the development account, at ``endpoint`` (default: Azurite's own;
        a proxy in front of it works too, Shared Key signs no host)."""
        return {
            "azure_storage_account_name": self.account,
            "azure_storage_account_key": self.key,
            "azure_storage_endpoint": f"{endpoint or self.endpoint}/{self.account}",
            "azure_allow_http": "true",
        }

    def create_container(self, name: str) -> None:
        """Create a container (a signed ``PUT ?restype=container``).

        Raises:
            RuntimeError: Azurite refused it.
        """
        location = AzureLocation(f"{self.endpoint}/{self.account}", self.account, self.key, name, "")
        status = signed_request("PUT", location, location.container_path() + "?restype=container")
        if status != 201:
            raise RuntimeError(f"cannot create container {name}: HTTP {status}")

    def stop(self) -> None:
        """Stop Azurite (SIGTERM, then SIGKILL) by its pid and delete its blobs."""
        proc, self._proc = self._proc, None
        stop_process(proc)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> AzuriteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
