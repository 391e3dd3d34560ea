"""The client's plumbing (one httpx pool, errors as their classes) and the topic admin calls."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import httpx
import orjson

from topiclake import errors
from topiclake.client._wire import DEFAULT_URL, GatewayUnavailable, error_from_body
from topiclake.client.responses import Metadata, ProducerId, Topic
from topiclake.errors import TopiclakeError

if TYPE_CHECKING:
    from topiclake.client._produce import ClusterProducer
    from topiclake.client.cluster import ClusterRouter


def _tls(verify: ssl.SSLContext | str | bool, cert: str | tuple[str, str] | None) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for the client's TLS options (a client certificate needs an SSL context)."""
    if isinstance(verify, str):
        verify = ssl.create_default_context(cafile=verify)
    if cert is None:
        return verify
    if not isinstance(verify, ssl.SSLContext):
        checked = verify
        verify = ssl.create_default_context()
        if not checked:
            verify.check_hostname = False
            verify.verify_mode = ssl.CERT_NONE
    certfile, keyfile = (cert, None) if isinstance(cert, str) else cert
    verify.load_cert_chain(certfile, keyfile)
    return verify


class ClientBase:
    """Connection pool, requests and errors, and the admin calls of the native API.

    Args:
        url: Base URL of the gateway.
        timeout: Seconds to wait for an answer (a long-poll fetch adds its ``wait_ms``).
        headers: Extra headers sent with every request (e.g. ``Authorization``).
        transport: An httpx transport (tests).
        verify: How to verify an ``https`` gateway: True (the system's trust store), a CA bundle file,
            an ``ssl.SSLContext``, or False (no verification; never in production).
        cert: A client certificate for mTLS: a PEM file holding certificate and key, or a
            ``(cert_file, key_file)`` pair.
    """

    #: Set by a client that bootstraps from a cluster: routes requests to brokers and leaders.
    _router: ClusterRouter | None = None
    #: Set with the router: produces to each partition's leader.
    _producer: ClusterProducer | None = None

    def __init__(
        self,
        url: str = DEFAULT_URL,
        timeout: float = 30.0,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | str | bool = True,
        cert: str | tuple[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            headers=dict(headers or {}),
            transport=transport,
            verify=_tls(verify, cert),
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # ------------------------------------------------------------------ plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """Send a request to the gateway (with a cluster: to any broker that answers)."""
        kwargs: dict[str, Any] = {
            "json": json,
            "content": content,
            "params": params,
            "headers": headers,
            "timeout": timeout,
        }
        if self._router is not None:
            return self._router.call_any(
                lambda base: self._send(base, method, path, **kwargs), safe_to_repeat=method == "GET"
            )
        return self._send(None, method, path, **kwargs)

    def _send(
        self,
        base: str | None,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """Send one request to ``base`` (a broker's base URL; None: the client's URL) and raise its error."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        body = orjson.dumps(json) if json is not None else content
        hdrs = dict(headers or {})
        if json is not None:
            hdrs.setdefault("content-type", "application/json")
        url = path if base is None else base + path
        try:
            resp = self._http.request(
                method,
                url,
                content=body,
                params=query,
                headers=hdrs,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, base or self.url) from exc
        if resp.status_code >= 400:
            raise error_from_body(resp.status_code, resp.content, resp.headers.get("retry-after"))
        return resp

    def _partition_request(
        self,
        topic: str,
        partition: int,
        method: str,
        path: str,
        *,
        safe_to_repeat: bool | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send a request about one partition: to its leader (with retries) when bootstrapping.

        ``safe_to_repeat`` (default: for GET) allows a retry after a failure that may have been written.
        """
        if self._router is None:
            return self._send(None, method, path, **kwargs)
        timeout = kwargs.get("timeout") or self.timeout
        return self._router.call_leader(
            topic,
            partition,
            lambda base: self._send(base, method, path, **kwargs),
            deadline=time.monotonic() + timeout,
            safe_to_repeat=method == "GET" if safe_to_repeat is None else safe_to_repeat,
        )

    def _idempotent_for(self, acks: str) -> bool:
        """Whether a produce call with ``acks`` uses the idempotent producer (bootstrapping clients)."""
        return False

    def _transport_error(self, exc: httpx.HTTPError, url: str | None = None) -> TopiclakeError:
        url = url or self.url
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return errors.RequestTimedOut(f"no answer from {url} in time ({exc})", url=url)
        if isinstance(exc, httpx.TransportError):
            connected = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            return GatewayUnavailable(
                f"cannot reach the gateway at {url} ({exc or type(exc).__name__}): "
                f"is `topiclake serve` running at {url}?",
                url=url,
                connected=connected,
            )
        return TopiclakeError(f"HTTP request to {url} failed: {exc}", url=url)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return orjson.loads(self._request(method, path, **kwargs).content)

    @staticmethod
    def _topic_path(topic: str) -> str:
        return "/v1/topics/" + quote(topic, safe="")

    @staticmethod
    def _group_path(group: str) -> str:
        return "/v1/groups/" + quote(group, safe="")

    # ------------------------------------------------------------------ metadata and topics

    def metadata(self) -> Metadata:
        """Cluster id, brokers and the leaders of every partition."""
        if self._router is not None:
            return self._router.refresh().doc
        return cast(Metadata, self._json("GET", "/v1/metadata"))

    def list_topics(self) -> list[Topic]:
        """Every topic with its partition count and configs."""
        return cast(list[Topic], self._json("GET", "/v1/topics")["topics"])

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str | int] | None = None,
        *,
        replication_factor: int | None = None,
    ) -> Topic:
        """Create a topic.

        ``replication_factor`` (sent only when given): how many brokers may lead each partition; a cluster
        refuses more than its live brokers.

        Raises:
            TopicExists: A topic of that name exists.
            InvalidConfig: A config is unknown or has a bad value.
        """
        body: dict[str, Any] = {
            "name": name,
            "partitions": partitions,
            "configs": {k: str(v) for k, v in (configs or {}).items()},
        }
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        return cast(Topic, self._json("POST", "/v1/topics", json=body))

    def describe_topic(self, name: str) -> Topic:
        """A topic with its configs and the beginning and end offsets of each partition."""
        return cast(Topic, self._json("GET", self._topic_path(name)))

    def alter_topic_configs(
        self,
        name: str,
        updates: Mapping[str, str | int] | None = None,
        deletes: Sequence[str] = (),
    ) -> Topic:
        """Set the configs in ``updates`` and reset those in ``deletes`` to their defaults."""
        body = {"set": {k: str(v) for k, v in (updates or {}).items()}, "delete": list(deletes)}
        return cast(Topic, self._json("PATCH", self._topic_path(name) + "/configs", json=body))

    def increase_partitions(self, name: str, count: int) -> Topic:
        """Raise the partition count of a topic to ``count`` (never lower)."""
        return cast(Topic, self._json("POST", self._topic_path(name) + "/partitions", json={"count": count}))

    def delete_topic(self, name: str) -> None:
        """Delete a topic."""
        self._request("DELETE", self._topic_path(name))

    def init_producer(self) -> ProducerId:
        """A new idempotent producer id and epoch."""
        return cast(ProducerId, self._json("POST", "/v1/producers"))
