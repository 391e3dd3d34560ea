"""One signed S3 request (AWS Signature Version 4, path-style), for the conditional-put probe.

delta-rs exposes no way to send a conditional PUT of our own, and boto3 is no dependency of the core;
the probe needs two requests, so they are signed here with the standard library.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
from urllib.parse import quote, urlparse


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sign(
    method: str,
    endpoint: str,
    path: str,
    *,
    region: str,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    body: bytes,
    now: dt.datetime,
) -> dict[str, str]:
    """The headers that sign a request (``x-amz-date``, ``x-amz-content-sha256``, ``Authorization``, ...)."""
    host = urlparse(endpoint).netloc
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    signed = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    if session_token:
        signed["x-amz-security-token"] = session_token
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            path,
            "",
            "".join(f"{n}:{signed[n].strip()}\n" for n in names),
            ";".join(names),
            payload_hash,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key_bytes = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret_key).encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        **{k: v for k, v in signed.items() if k != "host"},
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, "
            f"Signature={signature}"
        ),
    }


def object_path(bucket: str, key: str) -> str:
    """The path-style request path of an object, URI-encoded as SigV4 wants it."""
    return "/" + "/".join(quote(part, safe="-_.~") for part in [bucket, *key.split("/")])


def signed_request(
    method: str,
    endpoint: str,
    bucket: str,
    key: str,
    *,
    region: str,
    access_key: str,
    secret_key: str,
    session_token: str | None = None,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Send ``method`` to ``endpoint/bucket/key`` signed with SigV4; return the HTTP status.

    Raises:
        OSError: The endpoint cannot be reached.
    """
    parsed = urlparse(endpoint)
    path = object_path(bucket, key)
    auth = sign(
        method,
        endpoint,
        path,
        region=region,
        access_key=access_key,
        secret_key=secret_key,
        session_token=session_token,
        body=body,
        now=dt.datetime.now(dt.UTC),
    )
    all_headers = {**auth, **(headers or {}), "Content-Length": str(len(body))}
    conn_cls = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parsed.netloc, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=all_headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()
