"""Shared Key signed blob requests for the broker's own commits on Azure: PUT, conditional PUT, GET.

The Azure twin of :class:`~.s3_client.S3Client` for the object-store append path
(:mod:`topiclake.platform.log.object_append`): the same three requests, over the same pooled client with
the same retries, signed with the account key (:mod:`.sharedkey`). A data file is one ``Put Blob``
(``x-ms-blob-type: BlockBlob``; a commit's files are far below Put Blob's 5000 MiB limit); a log entry is
one ``Put Blob`` with ``If-None-Match: *``, which Azure refuses with ``409 BlobAlreadyExists`` when the
version exists -- the put-if-absent delta-rs (object_store) itself commits with on Azure, so the two
exclude each other per version.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlparse

from topiclake.platform.storage.s3_client import ObjectClient
from topiclake.platform.storage.sharedkey import AzureLocation, sign

#: Answers Azure asks a client to retry (timeouts, throttling, server errors).
AZURE_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class AzureClient(ObjectClient):
    """:class:`~.s3_client.ObjectClient` for Azure Blob Storage, signed with the account key.

    Args:
        location: Where the blobs are (:func:`~.sharedkey.azure_location`).
        deadline_s: How long one call keeps retrying transport failures and retriable answers.
        timeout_s: Timeout of one request.
    """

    retry_statuses = AZURE_RETRY_STATUSES
    exists_statuses = frozenset({409, 412})

    def __init__(self, location: AzureLocation, deadline_s: float = 120.0, timeout_s: float = 10.0) -> None:
        service = urlparse(location.endpoint)  # the account's path segment is in every request's path
        super().__init__(f"{service.scheme}://{service.netloc}", deadline_s, timeout_s)
        self.location = location

    def _request(self, method: str, key: str, body: bytes, conditional: bool) -> tuple[str, dict[str, str]]:
        path = self.location.path(key)
        headers = {"x-ms-blob-type": "BlockBlob"} if method == "PUT" else {}
        if conditional:
            headers["If-None-Match"] = "*"
        auth = sign(
            method, self.location, path, headers, content_length=len(body), now=dt.datetime.now(dt.UTC)
        )
        return path, {**headers, **auth}
