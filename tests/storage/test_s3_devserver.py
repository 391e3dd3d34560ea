"""The local S3 API server serves requests concurrently, each atomic per key as on S3.

moto alone checks a conditional PUT's condition and writes in two steps, and lists a bucket by copying its
key names and then looking each one up; ``topiclake.objectstore.devserver`` locks per key (and a listing
against a key's DELETE) so that neither race shows. These tests send raw HTTP from many threads to the
session's server (moto checks no signature, but wants one present).
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from urllib.parse import urlparse

from topiclake.objectstore import LocalS3Server

_AUTH = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"
_bucket = iter(range(1_000_000))


def _request(
    endpoint: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str]]:
    url = urlparse(endpoint)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        all_headers = {"Content-Length": str(len(body)), "Authorization": _AUTH, **(headers or {})}
        conn.request(method, path, body=body, headers=all_headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def _race(endpoint: str, racers: int, send: object) -> list[tuple[int, dict[str, str]]]:
    """``racers`` threads released at once, each calling ``send(i)``; their answers."""
    start = threading.Barrier(racers)
    answers: list[tuple[int, dict[str, str]]] = []
    lock = threading.Lock()

    def racer(i: int) -> None:
        start.wait()
        answer = send(i)  # type: ignore[operator]
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_concurrent_conditional_puts_of_one_key_have_exactly_one_winner(s3_server: LocalS3Server) -> None:
    bucket = f"race-{next(_bucket)}"
    s3_server.create_bucket(bucket)
    endpoint = s3_server.endpoint
    for k in range(40):
        path = f"/{bucket}/_delta_log/{k:020d}.json"
        created = _race(
            endpoint,
            4,
            lambda i, path=path: _request(
                endpoint, "PUT", path, f"writer {i}".encode() * 200, {"If-None-Match": "*"}
            ),
        )
        assert sorted(status for status, _ in created) == [200, 412, 412, 412], path
        etag = next(h["etag"] for status, h in created if status == 200)
        replaced = _race(
            endpoint,
            4,
            lambda i, path=path, etag=etag: _request(
                endpoint, "PUT", path, f"next {i}".encode(), {"If-Match": etag}
            ),
        )
        assert sorted(status for status, _ in replaced) == [200, 412, 412, 412], path


def test_overwrites_deletes_gets_and_listings_of_the_same_keys_never_fail(s3_server: LocalS3Server) -> None:
    bucket = f"race-{next(_bucket)}"
    s3_server.create_bucket(bucket)
    endpoint = s3_server.endpoint
    answers: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()

    def worker(w: int) -> None:
        for n in range(40):
            key = f"/{bucket}/hot/{n % 3}"
            op = ("PUT", "GET", "DELETE", "LIST")[(n + w) % 4]
            if op == "PUT":
                status, _ = _request(endpoint, "PUT", key, b"z" * 100_000)
            elif op == "LIST":
                status, _ = _request(endpoint, "GET", f"/{bucket}?list-type=2&prefix=hot/")
            else:
                status, _ = _request(endpoint, op, key)
            with lock:
                answers[(op, status)] += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(answers.values()) == 8 * 40
    assert {status for (op, status) in answers if op != "GET"} <= {200, 204}, answers
    assert {status for (op, status) in answers if op == "GET"} <= {200, 404}, answers
