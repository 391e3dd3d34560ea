"""Whether a warehouse on S3 can be reached at all, asked before anything else runs, in words a user acts on.

Without this, a wrong endpoint, bucket or key surfaced from deep inside delta-rs: a Rust panic for an
endpoint that is not a URL (``InvalidUri(InvalidUriChar)``), or a traceback under uvicorn's "Application
startup failed" for a bucket that does not exist. :func:`check_endpoint` needs no I/O and runs whenever a
:class:`~topiclake.platform.storage.warehouse.Storage` is made; :func:`check_access` sends one signed
``HEAD`` of the bucket and turns its answer into one line that says what to change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from topiclake.errors import StorageError
from topiclake.platform.storage._sigv4 import signed_request

S3_SCHEMES = frozenset({"s3", "s3a"})
ENDPOINT_NAMES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "aws_endpoint", "endpoint")


def option(options: Mapping[str, str], *names: str) -> str | None:
    """A storage option by any of its names (case-insensitive), else the process environment's, as
    delta-rs falls back to it for ``AWS_*`` keys."""
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def check_endpoint(root: str, options: Mapping[str, str]) -> None:
    """Refuse an S3 endpoint that is not an http(s) URL (no I/O).

    Raises:
        StorageError: The endpoint cannot be a URL.
    """
    if urlparse(root).scheme not in S3_SCHEMES:
        return
    endpoint = option(options, *ENDPOINT_NAMES)
    if endpoint is None:
        return
    parsed = urlparse(endpoint.strip())
    valid = (
        parsed.scheme in ("http", "https")
        and bool(parsed.hostname)
        and not any(c.isspace() for c in endpoint)
    )
    try:
        valid = valid and (parsed.port is None or parsed.port > 0)
    except ValueError:  # a port that is not a number
        valid = False
    if not valid:
        raise StorageError(
            f"the S3 endpoint {endpoint!r} (AWS_ENDPOINT_URL) is not an http(s) URL: set it to the store's "
            "address, e.g. http://127.0.0.1:9000, or unset it for AWS S3",
            uri=root,
        )


def explain(status: int, root: str, endpoint: str) -> str | None:
    """What an HTTP status from the store means for the user, or None when it is no access problem."""
    bucket = urlparse(root).netloc
    if status == 404:
        return (
            f"the bucket {bucket!r} does not exist at {endpoint}: create it first, or fix the warehouse URI"
        )
    if status in (401, 403):
        return (
            f"the store at {endpoint} refused access to the bucket {bucket!r} (HTTP {status}): check "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the role) and the bucket's policy"
        )
    if status == 301:
        return f"the bucket {bucket!r} is in another region than AWS_REGION: set AWS_REGION to the bucket's"
    return None


def check_access(root: str, options: Mapping[str, str], timeout_s: float = 10.0) -> None:
    """Ask the store once whether the warehouse's bucket exists and these credentials may use it.

    Only for S3 with an explicit endpoint and static keys (what a signed request needs); otherwise the
    first real request tells. Raises nothing for answers that are not about access (a 5xx is retried by
    every real request later).

    Raises:
        StorageError: The endpoint is unreachable, the bucket is missing, or access is refused.
    """
    if urlparse(root).scheme not in S3_SCHEMES:
        return
    check_endpoint(root, options)
    endpoint = option(options, *ENDPOINT_NAMES)
    access = option(options, "AWS_ACCESS_KEY_ID", "aws_access_key_id", "access_key_id")
    secret = option(options, "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "secret_access_key")
    if not endpoint or not access or not secret:
        return
    region = option(options, "AWS_REGION", "AWS_DEFAULT_REGION", "aws_region", "region") or "us-east-1"
    token = option(options, "AWS_SESSION_TOKEN", "aws_session_token", "session_token", "token")
    try:
        status = signed_request(
            "HEAD",
            endpoint.strip(),
            urlparse(root).netloc,
            "",
            region=region,
            access_key=access,
            secret_key=secret,
            session_token=token,
            timeout_s=timeout_s,
        )
    except OSError as exc:
        raise StorageError(
            f"cannot reach the object store at {endpoint} ({exc}): check AWS_ENDPOINT_URL and that the "
            "store is running",
            uri=root,
        ) from exc
    problem = explain(status, root, endpoint)
    if problem is not None:
        raise StorageError(problem, uri=root)


__all__ = ["check_access", "check_endpoint", "explain", "option"]
