"""Signed S3 object requests for the broker's own object-store commits: PUT, conditional PUT, GET.

delta-rs sends a commit's requests itself and exposes none of them; the object-store append path
(:mod:`topiclake.platform.log.object_append`) needs exactly three kinds, so they are sent here over one
pooled HTTP/1.1 client (httpx, a dependency of the core already) and signed with the project's SigV4
(:mod:`._sigv4`, checked against botocore's by tests/storage/test_s3_sigv4.py). Where the store is and
how to sign for it comes from the same storage options (and ``AWS_*`` environment variables) delta-rs
reads: endpoint, region, static keys, virtual-hosted or path-style addressing.

Transport failures and answers that S3 asks to retry (5xx, 429, 409 for a conditional write racing
another) are retried here with backoff until ``deadline_s``; the caller sees an ``OSError`` after that.
A retried conditional PUT may answer 412 because its own earlier attempt landed: the caller tells that
apart (:meth:`S3Client.put_if_absent` only reports what the store said).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, urlparse

import httpx

from topiclake.platform.storage._commit_safety import S3_SCHEMES, _credential, _option, _truthy
from topiclake.platform.storage._sigv4 import sign

logger = logging.getLogger(__name__)

#: Statuses S3 asks a client to retry: throttling, server errors, a conditional write in flight (409).
RETRY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class S3Location:
    """Where a warehouse's objects are and the keys to sign requests for them with."""

    endpoint: str  # scheme://host[:port], the bucket's host when virtual-hosted
    bucket: str
    prefix: str  # key prefix of the warehouse root, no slashes at either end
    region: str
    access_key: str
    secret_key: str
    session_token: str | None
    virtual_hosted: bool

    def path(self, key: str) -> str:
        """The request path of ``key`` (relative to the warehouse root), URI-encoded as SigV4 wants it."""
        full = "/".join(p for p in [self.prefix, key] if p)
        parts = full.split("/") if self.virtual_hosted else [self.bucket, *full.split("/")]
        return "/" + "/".join(quote(part, safe="-_.~") for part in parts)


def s3_location(root: str, options: dict[str, str]) -> S3Location | None:
    """The S3 location of a warehouse ``root`` (``s3://bucket/prefix``), or None when requests cannot be
    signed here (not S3, or no static keys: instance profiles and web identity are delta-rs's alone)."""
    parsed = urlparse(root)
    if parsed.scheme not in S3_SCHEMES:
        return None
    access = _credential(options, "AWS_ACCESS_KEY_ID", "aws_access_key_id", "access_key_id")
    secret = _credential(options, "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "secret_access_key")
    if not access or not secret:
        return None
    region = _credential(options, "AWS_REGION", "AWS_DEFAULT_REGION", "aws_region", "region") or "us-east-1"
    token = _credential(options, "AWS_SESSION_TOKEN", "aws_session_token", "session_token", "token")
    endpoint = _credential(options, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "aws_endpoint", "endpoint")
    virtual = _truthy(_option(options, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "virtual_hosted_style_request"))
    bucket = parsed.netloc
    if not endpoint:  # AWS S3 itself: virtual-hosted addressing, as delta-rs uses there
        endpoint, virtual = f"https://{bucket}.s3.{region}.amazonaws.com", True
    return S3Location(
        endpoint=endpoint.rstrip("/"),
        bucket=bucket,
        prefix=parsed.path.strip("/"),
        region=region,
        access_key=access,
        secret_key=secret,
        session_token=token,
        virtual_hosted=virtual,
    )


class ObjectClient:
    """Signed requests to one warehouse's objects over a pool of keep-alive connections (thread-safe):
    PUT, conditional PUT, GET, DELETE with retries. Subclasses sign (:meth:`_request`) for their store.

    Args:
        endpoint: ``scheme://host[:port]`` the requests go to.
        deadline_s: How long one call keeps retrying transport failures and retriable answers.
        timeout_s: Timeout of one request.
    """

    #: Answers the store asks a client to retry.
    retry_statuses: frozenset[int] = RETRY_STATUSES
    #: Answers of a conditional PUT that mean "an object is there".
    exists_statuses: frozenset[int] = frozenset({412})

    def __init__(self, endpoint: str, deadline_s: float = 120.0, timeout_s: float = 10.0) -> None:
        self.deadline_s = deadline_s
        self._http = httpx.Client(
            base_url=endpoint,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {}  # by method (and "PUT?" for conditional), for tests and metrics

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def put(self, key: str, body: bytes) -> None:
        """Store ``body`` at ``key`` (an idempotent overwrite: retried until stored or the deadline).

        Raises:
            OSError: The store refused it, or did not answer before the deadline.
        """
        status, _ = self._call("PUT", key, body, False)
        if not 200 <= status < 300:
            raise OSError(f"PUT {key}: HTTP {status}")

    def put_if_absent(self, key: str, body: bytes) -> bool:
        """Store ``body`` at ``key`` unless an object is there (``If-None-Match: *``).

        Returns True when this call's request stored it, False when the store answered that the key
        exists (S3: 412; Azure: 409 BlobAlreadyExists), written by another writer or by an earlier attempt
        of this call whose answer was lost (a retry after a cut connection). The caller tells those apart
        by reading the object.

        Raises:
            OSError: The store refused it otherwise, or did not answer before the deadline.
        """
        status, _ = self._call("PUT", key, body, True)
        if status in self.exists_statuses:
            return False
        if not 200 <= status < 300:
            raise OSError(f"conditional PUT {key}: HTTP {status}")
        return True

    def get(self, key: str) -> bytes | None:
        """The object at ``key``, or None if there is none.

        Raises:
            OSError: The store refused it otherwise, or did not answer before the deadline.
        """
        status, data = self._call("GET", key, b"", False)
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise OSError(f"GET {key}: HTTP {status}")
        return data

    def delete(self, key: str) -> None:
        """Delete the object at ``key`` (none there is fine).

        Raises:
            OSError: The store refused it, or did not answer before the deadline.
        """
        status, _ = self._call("DELETE", key, b"", False)
        if status != 404 and not 200 <= status < 300:
            raise OSError(f"DELETE {key}: HTTP {status}")

    def _request(self, method: str, key: str, body: bytes, conditional: bool) -> tuple[str, dict[str, str]]:
        """The request path and headers (signature included) of one attempt."""
        raise NotImplementedError

    def _call(self, method: str, key: str, body: bytes, conditional: bool) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.deadline_s
        attempt = 0
        label = method + ("?" if conditional else "")
        while True:
            path, headers = self._request(method, key, body, conditional)
            with self._lock:
                self.requests[label] = self.requests.get(label, 0) + 1
            try:
                resp = self._http.request(method, path, content=body or None, headers=headers)
                status, data = resp.status_code, resp.content
                retry = status in self.retry_statuses and status not in (
                    self.exists_statuses if conditional else ()
                )
                failure = f"HTTP {status}" if retry else None
            except httpx.TransportError as exc:  # refused, reset, cut, timed out: outcome unknown for a PUT
                status, data, failure = 0, b"", f"{type(exc).__name__}: {exc}"
            if failure is None:
                return status, data
            attempt += 1
            backoff = min(0.02 * 2**attempt, 1.0)
            if time.monotonic() + backoff > deadline:
                raise OSError(f"{method} {key}: {failure} (gave up after {attempt} attempts)")
            if attempt == 1 or attempt % 10 == 0:
                logger.warning("%s %s: %s; retrying (attempt %d)", method, key, failure, attempt)
            time.sleep(backoff)


class S3Client(ObjectClient):
    """:class:`ObjectClient` for S3, signed with SigV4.

    Args:
        location: Where the objects are (:func:`s3_location`).
        deadline_s: How long one call keeps retrying transport failures and retriable answers.
        timeout_s: Timeout of one request.
    """

    def __init__(self, location: S3Location, deadline_s: float = 120.0, timeout_s: float = 10.0) -> None:
        super().__init__(location.endpoint, deadline_s, timeout_s)
        self.location = location

    def _request(self, method: str, key: str, body: bytes, conditional: bool) -> tuple[str, dict[str, str]]:
        loc = self.location
        path = loc.path(key)
        auth = sign(
            method,
            loc.endpoint,
            path,
            region=loc.region,
            access_key=loc.access_key,
            secret_key=loc.secret_key,
            session_token=loc.session_token,
            body=body,
            now=dt.datetime.now(dt.UTC),
        )
        return path, {**auth, "If-None-Match": "*"} if conditional else auth
