"""The probe's request signature equals botocore's (moto does not check signatures, S3 and MinIO do)."""

from __future__ import annotations

import datetime as dt

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from topiclake.platform.storage._sigv4 import object_path, sign


def test_signature_matches_botocore() -> None:
    endpoint = "http://127.0.0.1:9000"
    path = object_path("lake", "wh/_system/commit_probe/abc")
    body = b"probe"
    request = AWSRequest(method="PUT", url=endpoint + path, data=body)
    S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-1").add_auth(request)
    when = dt.datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    ours = sign(
        "PUT",
        endpoint,
        path,
        region="eu-west-1",
        access_key="AKID",
        secret_key="SECRET",
        session_token="TOKEN",
        body=body,
        now=when,
    )
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-security-token"] == "TOKEN"
