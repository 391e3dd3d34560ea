"""Signed Azure Blob Storage requests (Shared Key authorization) and where an Azure warehouse's blobs are.

The Azure twin of :mod:`._sigv4`: the commit-safety probe sends two conditional ``PUT``s of its own, which
delta-rs cannot send for it, and the Azure SDK is no dependency of the core. The string to sign is the
Blob service's (version 2015-02-21 and later: an empty ``Content-Length`` when it is 0); a test checks it
against the Azure SDK's own signer. Where the account is comes from the same storage options (and
``AZURE_*`` environment variables) delta-rs/object_store reads: account name and key, an explicit endpoint
(``azure_storage_endpoint``, path-style ``http://host:port/<account>``), or the emulator
(``azure_storage_use_emulator``: Azurite's well-known ``devstoreaccount1`` at ``AZURITE_BLOB_STORAGE_URL``,
default ``http://127.0.0.1:10000``).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import http.client
import os
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import format_datetime
from urllib.parse import parse_qsl, quote, urlparse

#: Schemes delta-rs/object_store reads as Azure Blob Storage / ADLS Gen2.
AZURE_SCHEMES = frozenset({"az", "abfs", "abfss", "adl", "azure"})
#: The Blob service version the requests speak.
API_VERSION = "2021-08-06"
#: Azurite's (and the retired Storage Emulator's) published development account and key.
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_ACCOUNT_NAMES = ("azure_storage_account_name", "account_name", "AZURE_STORAGE_ACCOUNT_NAME")
_KEY_NAMES = ("azure_storage_account_key", "azure_storage_access_key", "access_key", "account_key")
_ENDPOINT_NAMES = ("azure_storage_endpoint", "azure_endpoint", "endpoint", "AZURE_STORAGE_ENDPOINT")
_EMULATOR_NAMES = ("azure_storage_use_emulator", "use_emulator", "AZURE_STORAGE_USE_EMULATOR")


def azure_option(options: Mapping[str, str], *names: str) -> str | None:
    """A storage option by any of its names (case-insensitive), else the ``AZURE_*`` environment variable
    of that name (upper-cased), as object_store falls back to it."""
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    env = [n.upper() for n in names if n.upper().startswith("AZURE_")]  # never a bare ENDPOINT
    return next((os.environ[n] for n in env if os.environ.get(n)), None)


@dataclass(frozen=True)
class AzureLocation:
    """Where a warehouse's blobs are and the key to sign requests for them with."""

    endpoint: str  # scheme://host[:port][/account] : the account's blob service, without a trailing slash
    account: str
    key: str  # base64, as the portal shows it
    container: str
    prefix: str  # blob name prefix of the warehouse root, no slashes at either end

    def container_path(self) -> str:
        """The request path of the container (append ``?restype=container`` to create or ask for it)."""
        return urlparse(self.endpoint).path.rstrip("/") + "/" + quote(self.container, safe="-_.~")

    def path(self, blob: str) -> str:
        """The request path of ``blob`` (relative to the warehouse root), URI-encoded."""
        base = urlparse(self.endpoint).path.rstrip("/")
        name = "/".join(p for p in [self.prefix, blob] if p)
        parts = [self.container, *name.split("/")] if name else [self.container]
        return base + "/" + "/".join(quote(part, safe="-_.~") for part in parts)


def azure_location(root: str, options: Mapping[str, str]) -> AzureLocation | None:
    """The location of an Azure warehouse ``root`` (``abfss://container@account.dfs.core.windows.net/wh``,
    ``az://container/wh``), or None when requests cannot be signed here (not Azure, or no account key:
    SAS tokens and Entra ID are delta-rs's alone)."""
    parsed = urlparse(root)
    if parsed.scheme not in AZURE_SCHEMES:
        return None
    emulator = (azure_option(options, *_EMULATOR_NAMES) or "").strip().lower() in {"1", "true", "yes", "on"}
    host_account = parsed.hostname.split(".")[0] if parsed.hostname and "." in parsed.hostname else None
    account = (
        azure_option(options, *_ACCOUNT_NAMES) or host_account or (EMULATOR_ACCOUNT if emulator else None)
    )
    key = azure_option(options, *_KEY_NAMES) or (EMULATOR_KEY if emulator else None)
    if not account or not key:
        return None
    container = parsed.username or parsed.hostname or ""
    if parsed.scheme in ("az", "adl", "azure") and "@" not in parsed.netloc:
        container = parsed.netloc
    endpoint = azure_option(options, *_ENDPOINT_NAMES)
    if endpoint is None and emulator:
        endpoint = (
            os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000").rstrip("/") + "/" + account
        )
    if endpoint is None:
        endpoint = f"https://{account}.blob.core.windows.net"
    return AzureLocation(endpoint.rstrip("/"), account, key, container, parsed.path.strip("/"))


def sign(
    method: str,
    location: AzureLocation,
    path_and_query: str,
    headers: Mapping[str, str],
    *,
    content_length: int,
    now: dt.datetime,
) -> dict[str, str]:
    """The ``x-ms-date``, ``x-ms-version`` and ``Authorization`` headers of one request.

    ``headers`` are the request's other headers (``x-ms-*`` ones and conditions such as ``If-None-Match``),
    which the signature covers.
    """
    all_headers = {**headers, "x-ms-date": format_datetime(now, usegmt=True), "x-ms-version": API_VERSION}
    lowered = {k.lower(): v.strip() for k, v in all_headers.items()}
    standard = [
        "content-encoding",
        "content-language",
        "content-length",
        "content-md5",
        "content-type",
        "date",
        "if-modified-since",
        "if-match",
        "if-none-match",
        "if-unmodified-since",
        "range",
    ]
    lowered["content-length"] = str(content_length) if content_length else ""  # "" for 0 since 2015-02-21
    values = [lowered.get(h, "") for h in standard]
    ms = "".join(f"{k}:{lowered[k]}\n" for k in sorted(lowered) if k.startswith("x-ms-"))
    parsed = urlparse(path_and_query)
    resource = f"/{location.account}{parsed.path}"
    query: dict[str, list[str]] = {}
    for k, v in parse_qsl(parsed.query, keep_blank_values=True):
        query.setdefault(k.lower(), []).append(v)
    resource += "".join(f"\n{k}:{','.join(sorted(query[k]))}" for k in sorted(query))
    to_sign = "\n".join([method.upper(), *values]) + "\n" + ms + resource
    digest = hmac.new(base64.b64decode(location.key), to_sign.encode(), hashlib.sha256).digest()
    signature = base64.b64encode(digest).decode()
    return {
        "x-ms-date": all_headers["x-ms-date"],
        "x-ms-version": API_VERSION,
        "Authorization": f"SharedKey {location.account}:{signature}",
    }


def signed_request(
    method: str,
    location: AzureLocation,
    path_and_query: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Send one Shared Key signed request to the account's blob service; return the HTTP status.

    Raises:
        OSError: The endpoint cannot be reached.
    """
    parsed = urlparse(location.endpoint)
    extra = dict(headers or {})
    auth = sign(
        method, location, path_and_query, extra, content_length=len(body), now=dt.datetime.now(dt.UTC)
    )
    conn_cls = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parsed.netloc, timeout=timeout_s)
    try:
        conn.request(
            method, path_and_query, body=body, headers={**extra, **auth, "Content-Length": str(len(body))}
        )
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


__all__ = ["AZURE_SCHEMES", "AzureLocation", "azure_location", "azure_option", "sign", "signed_request"]
