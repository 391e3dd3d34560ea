"""Whether an S3 or Azure store keeps two writers of one Delta table apart: a probe, once per store.

Measured with deltalake 1.6.6 (docs/object-storage.md): every S3 commit is one ``PUT`` of
``_delta_log/<version>.json`` with ``If-None-Match: *``; the store answers ``412`` when the version
exists and delta-rs then retries on the next version. That is the whole mutual exclusion: no lock, no
rename. ``AWS_S3_ALLOW_UNSAFE_RENAME`` and the DynamoDB locking provider no longer change the commit path
(delta-rs 1.x removed the DynamoDB log store). A store that ignores ``If-None-Match`` (an S3-compatible
server without conditional writes) lets a second writer overwrite a committed version: 100 acknowledged
commits by four writers left 27 in the table. Configuration cannot tell such a store apart, so the probe
asks the store itself: two conditional PUTs of one new key; the second must be refused (412).

Azure Blob Storage (``abfss://``, ``az://``, ...): delta-rs (object_store) commits with the same
``If-None-Match: *`` PUT, which Azure refuses with ``409 BlobAlreadyExists``; the probe sends it signed
with the account key (:mod:`.sharedkey`). Without a key (SAS, Entra ID) it trusts Azure, which always
honours the condition.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Mapping
from urllib.parse import urlparse

from topiclake.errors import StorageError
from topiclake.platform.storage._access import explain
from topiclake.platform.storage._sigv4 import signed_request
from topiclake.platform.storage.sharedkey import AZURE_SCHEMES, azure_location
from topiclake.platform.storage.sharedkey import signed_request as azure_request

logger = logging.getLogger(__name__)

#: Schemes whose commits rest on S3's conditional put.
S3_SCHEMES = frozenset({"s3", "s3a"})
#: The storage option a user sets to run on a store without conditional writes anyway.
UNSAFE_OPTION = "AWS_S3_ALLOW_UNSAFE_RENAME"

_lock = threading.Lock()
_verified: dict[tuple[str, str], bool] = {}


def _option(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


def check_options(root: str, options: Mapping[str, str], *, fsync: bool, is_local: bool) -> None:
    """Refuse settings that cannot hold on this warehouse (no I/O).

    Raises:
        StorageError: ``fsync`` on an object store; conditional put disabled on S3.
    """
    if fsync and not is_local:
        raise StorageError(
            f"fsync applies to local warehouses only, not {root}: on object storage a commit is durable "
            "once the store acknowledged its PUT (acks=all waits for that); unset TOPICLAKE_BROKER__FSYNC",
            uri=root,
        )
    if urlparse(root).scheme not in S3_SCHEMES:
        return
    if (_option(options, "conditional_put", "aws_conditional_put") or "").lower() == "disabled":
        raise StorageError(
            f"{root}: conditional_put=disabled leaves Delta commits on S3 without mutual exclusion "
            "(deltalake 1.6 then refuses to commit at all); remove the option",
            uri=root,
        )
    if _option(options, "AWS_S3_LOCKING_PROVIDER") is not None:
        logger.warning(
            "%s: AWS_S3_LOCKING_PROVIDER is ignored by deltalake>=1.0 (no DynamoDB log store); commits "
            "use S3 conditional writes (If-None-Match), checked by a probe when a writer starts",
            root,
        )


def verify_conditional_put(root: str, options: Mapping[str, str]) -> bool:
    """Probe the store under ``root`` once per process; refuse a store that ignores ``If-None-Match``.

    Returns True when commits are safe, False when they are not but the user accepted it with
    ``AWS_S3_ALLOW_UNSAFE_RENAME=true`` (logged loudly). Needs write access: only writers call it.

    Raises:
        StorageError: The store lets two commits of one version both succeed, and the user did not
            accept it; or the probe could not run.
    """
    parsed = urlparse(root)
    if parsed.scheme not in S3_SCHEMES | AZURE_SCHEMES:
        return True
    endpoint = _credential(options, "AWS_ENDPOINT_URL", "endpoint") or ""
    if parsed.scheme in AZURE_SCHEMES:
        location = azure_location(root, options)
        endpoint = location.endpoint if location is not None else ""
    key = (f"{parsed.scheme}://{parsed.netloc}", endpoint)
    with _lock:
        safe = _verified.get(key)
        if safe is None:
            safe = _probe_azure(root, options) if parsed.scheme in AZURE_SCHEMES else _probe(root, options)
            _verified[key] = safe
    if safe:
        return True
    if _truthy(_option(options, UNSAFE_OPTION)):
        logger.error(
            "UNSAFE: %s does not honour If-None-Match; two writers of one table (brokers, the Spark sink) "
            "can overwrite each other's commits and lose acknowledged records. Running anyway because %s "
            "is set: run exactly one writer per table",
            root,
            UNSAFE_OPTION,
        )
        return False
    raise StorageError(
        f"{root}: the object store ignores If-None-Match (conditional put), so concurrent Delta commits "
        "can overwrite each other and lose acknowledged records. Use a store with conditional writes "
        f"(AWS S3, MinIO, R2, ...) or, with one writer per table only, set {UNSAFE_OPTION}=true in the "
        "storage options",
        uri=root,
    )


def _credential(options: Mapping[str, str], *names: str) -> str | None:
    # delta-rs falls back to the process environment for AWS_* keys the options lack; so does the probe
    return _option(options, *names) or next((os.environ[n] for n in names if os.environ.get(n)), None)


def _probe(root: str, options: Mapping[str, str]) -> bool:
    """Two signed ``PUT``s of one new key with ``If-None-Match: *``: the second must answer 412."""
    endpoint = _credential(options, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "aws_endpoint", "endpoint")
    if not endpoint:
        logger.info("%s: AWS S3 (conditional writes since 2024-08), no probe", root)
        return True
    access = _credential(options, "AWS_ACCESS_KEY_ID", "aws_access_key_id", "access_key_id")
    secret = _credential(options, "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "secret_access_key")
    if not access or not secret:
        logger.warning(
            "%s: no static keys to probe %s for conditional writes with; trusting it", root, endpoint
        )
        return True
    region = _credential(options, "AWS_REGION", "AWS_DEFAULT_REGION", "aws_region", "region") or "us-east-1"
    token = _credential(options, "AWS_SESSION_TOKEN", "aws_session_token", "session_token", "token")
    parsed = urlparse(root)
    key = "/".join(p for p in [parsed.path.strip("/"), "_system", "commit_probe", uuid.uuid4().hex] if p)

    def send(method: str, headers: dict[str, str] | None = None) -> int:
        return signed_request(
            method,
            endpoint,
            parsed.netloc,
            key,
            region=region,
            access_key=access,
            secret_key=secret,
            session_token=token,
            body=b"probe" if method == "PUT" else b"",
            headers=headers,
        )

    try:
        first = send("PUT", {"If-None-Match": "*"})
        if not 200 <= first < 300:
            problem = explain(first, root, endpoint) or f"PUT answered HTTP {first}"
            raise StorageError(f"cannot probe commits on {root}: {problem}", uri=root)
        second = send("PUT", {"If-None-Match": "*"})
        send("DELETE")
    except OSError as exc:
        message = f"cannot reach the object store at {endpoint} ({exc}): check AWS_ENDPOINT_URL"
        raise StorageError(message, uri=root) from exc
    safe = second == 412
    logger.info(
        "%s: conditional put %s (second PUT: HTTP %d)", root, "honoured" if safe else "IGNORED", second
    )
    return safe


def _probe_azure(root: str, options: Mapping[str, str]) -> bool:
    """Azure's put-if-absent, asked the same way: two Shared Key signed ``PUT``s of one new blob with
    ``If-None-Match: *``; the second must be refused (Azure answers ``409 BlobAlreadyExists``, the answer
    object_store maps to "already exists" and delta-rs retries on the next version; 412 also counts)."""
    location = azure_location(root, options)
    if location is None:
        logger.info("%s: no account key to probe Azure's conditional writes with; trusting it", root)
        return True
    path = location.path(f"_system/commit_probe/{uuid.uuid4().hex}")

    def send(method: str, headers: dict[str, str]) -> int:
        body = b"probe" if method == "PUT" else b""
        return azure_request(method, location, path, body=body, headers=headers)

    conditional = {"If-None-Match": "*", "x-ms-blob-type": "BlockBlob"}
    try:
        first = send("PUT", conditional)
        if not 200 <= first < 300:
            problem = {
                403: f"the account {location.account!r} refused the key (HTTP 403): check the account key",
                404: f"the container {location.container!r} does not exist at {location.endpoint}",
            }.get(first, f"PUT answered HTTP {first}")
            raise StorageError(f"cannot probe commits on {root}: {problem}", uri=root)
        second = send("PUT", conditional)
        send("DELETE", {})
    except OSError as exc:
        message = f"cannot reach the Azure blob service at {location.endpoint} ({exc}): check the endpoint"
        raise StorageError(message, uri=root) from exc
    safe = second in (409, 412)
    logger.info(
        "%s: conditional put %s (second PUT: HTTP %d)", root, "honoured" if safe else "IGNORED", second
    )
    return safe
