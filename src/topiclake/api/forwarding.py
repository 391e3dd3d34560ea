"""Forwarding to the partition's leader over HTTP, and routing of group requests to their coordinator.

:class:`HttpForwarder` is the gateway's :class:`~topiclake.platform.cluster.routing.Forwarder`: it sends
one partition's produce, fetch or offsets request to the leader's native API, marked as forwarded so the
leader never sends it on. :class:`ClusterRouting` is an ASGI middleware: it marks requests that another
broker forwarded, and sends consumer-group requests (native ``/v1/groups/{g}``, REST Proxy v2
``/consumers/{g}``, v3 ``consumer-groups/{g}``) to the group's coordinator, so every member of a group,
whichever broker it talks to, joins the one coordinator that holds the group.
"""

from __future__ import annotations

import base64
import logging
import re
import ssl
import threading
from typing import Any

import httpx
import orjson
import pyarrow as pa
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from topiclake.api.auth.access import HOST_KEY, PRINCIPAL_KEY, security_of
from topiclake.errors import NotLeader, RequestTimedOut, TopiclakeError
from topiclake.platform import Broker
from topiclake.platform.cluster import BrokerEndpoint
from topiclake.platform.cluster.routing import FORWARDED, FORWARDED_HEADER
from topiclake.platform.records import FetchResult, ProducerInfo, RecordResult
from topiclake.security.inter_broker import CLIENT, BrokerSigner
from topiclake.security.inter_broker import HEADER as PRINCIPAL_HEADER

logger = logging.getLogger(__name__)

_ARROW = "application/vnd.apache.arrow.stream"


def _error_classes() -> dict[str, type[TopiclakeError]]:
    found: dict[str, type[TopiclakeError]] = {}
    stack: list[type[TopiclakeError]] = [TopiclakeError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


_CLASSES = _error_classes()


def _error(doc: Any, status: int, target: BrokerEndpoint) -> TopiclakeError:
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        cls = _CLASSES.get(err["code"], TopiclakeError)
        raw = err.get("details")
        details: dict[str, Any] = raw if isinstance(raw, dict) else {}
        exc = cls(str(err.get("message") or err["code"]), **details)
        if isinstance(err.get("retriable"), bool):
            exc.retriable = err["retriable"]
        return exc
    return NotLeader(f"broker {target.broker_id} answered HTTP {status}", leader_id=target.broker_id)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


class HttpForwarder:
    """Reaches other brokers' native API (``/v1``) with a pooled HTTP client.

    Args:
        broker_id: This broker's id, sent in the forwarded-by header.
        tls: With TLS on: how to verify the other brokers (and present this one's certificate); the
            forwarder then speaks https.
    """

    def __init__(
        self, broker_id: int, signer: BrokerSigner | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        #: Signs the client's principal on each forwarded request (auth on): the leader checks the ACLs
        #: for the client, not for this broker (topiclake.security.inter_broker).
        self.signer = signer
        self._headers = {FORWARDED_HEADER: str(broker_id)}
        self._scheme = "http" if tls is None else "https"
        self._tls = tls
        # made on first forward: a client's transport imports httpcore (and trio, when installed), ~85 ms of
        # CPU at every broker's start that a broker without peers never needs
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _pool(self) -> httpx.Client:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                if self._closed:
                    raise RuntimeError("the forwarder is closed")
                self._client = httpx.Client(
                    timeout=httpx.Timeout(35.0, connect=2.0),
                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
                    headers=self._headers,
                    verify=self._tls if self._tls is not None else True,
                )
            return self._client

    def close(self) -> None:
        """Close pooled connections."""
        with self._lock:
            self._closed = True
            if self._client is not None:
                self._client.close()

    def _send(self, target: BrokerEndpoint, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = f"{self._scheme}://{target.host}:{target.port}{path}"
        client = CLIENT.get()
        if self.signer is not None and client is not None:
            signed = {PRINCIPAL_HEADER: self.signer.sign(client[0], client[1], method, path)}
            kwargs["headers"] = {**kwargs.get("headers", {}), **signed}
        try:
            response = self._pool().request(method, url, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never sent: safe to try elsewhere
            raise NotLeader(
                f"cannot reach broker {target.broker_id} at {target.host}:{target.port}: {exc}",
                leader_id=target.broker_id,
            ) from exc
        except httpx.HTTPError as exc:  # sent, but no answer: the leader may have written it
            raise RequestTimedOut(
                f"broker {target.broker_id} took the request but did not answer ({exc!r}); its outcome is "
                "unknown: retry (with an idempotent producer to be safe)",
                leader_id=target.broker_id,
            ) from exc
        if response.status_code >= 400:
            try:
                doc = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                doc = None
            raise _error(doc, response.status_code, target)
        return response

    def produce(
        self,
        target: BrokerEndpoint,
        topic: str,
        partition: int,
        table: pa.Table,
        acks: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
    ) -> list[RecordResult]:
        """Produce one partition's rows at its leader; one result per row."""
        records = []
        for row in table.select(["key", "value", "headers", "timestamp_ms"]).to_pylist():
            rec: dict[str, Any] = {
                "key": _b64(row["key"]),
                "value": _b64(row["value"]),
            }
            if row["headers"] is not None:
                rec["headers"] = [{"key": h["key"], "value": _b64(h["value"])} for h in row["headers"]]
            if row["timestamp_ms"] is not None:
                rec["timestamp"] = row["timestamp_ms"]
            records.append(rec)
        body: dict[str, Any] = {"records": records}
        if producer is not None:
            body["producer"] = {
                "id": producer.producer_id,
                "epoch": producer.epoch,
                "sequence": producer.base_sequence,
            }
            if producer.scope is not None:  # a Kafka producer's per-partition numbers: keep them apart
                body["producer"]["scope"] = producer.scope
        params = {"partition": partition, "acks": acks, "encoding": "binary"}
        response = self._send(
            target,
            "POST",
            f"/v1/topics/{topic}/records",
            params=params,
            content=orjson.dumps(body),
            headers={"content-type": "application/json"},
        )
        out = []
        for r in orjson.loads(response.content)["results"]:
            err = r.get("error")
            exc = None
            if err:
                exc = _CLASSES.get(err.get("code"), TopiclakeError)(str(err.get("message")))
            out.append(RecordResult(r.get("partition"), r.get("offset"), r.get("timestamp"), exc))
        if out and all(isinstance(res.error, NotLeader) for res in out):
            # the broker we took for the leader does not lead it (one of our views is a tick old):
            # nothing was written there, so the router may look again
            raise out[0].error  # type: ignore[misc]
        return out

    def fetch(
        self,
        target: BrokerEndpoint,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
        wait_ms: float,
    ) -> FetchResult:
        """Fetch at the leader, as Arrow (the records' bytes as stored)."""
        params = {
            "offset": offset,
            "max_records": max_records,
            "max_bytes": max_bytes,
            "wait_ms": int(wait_ms),
        }
        response = self._send(
            target,
            "GET",
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params=params,
            headers={"accept": _ARROW},
            timeout=wait_ms / 1000 + 30,
        )
        records = pa.ipc.open_stream(response.content).read_all()
        h = response.headers
        return FetchResult(
            topic,
            partition,
            records,
            int(h["x-topiclake-high-watermark"]),
            int(h["x-topiclake-log-start-offset"]),
            int(h["x-topiclake-next-offset"]),
        )

    def list_offsets(self, target: BrokerEndpoint, topic: str, partition: int, spec: str | int) -> int | None:
        """Earliest, latest or by timestamp, at the leader."""
        params = {"timestamp": spec} if isinstance(spec, int) and spec >= 0 else {}
        path = f"/v1/topics/{topic}/partitions/{partition}/offsets"
        response = self._send(target, "GET", path, params=params)
        doc = orjson.loads(response.content)
        if spec in ("earliest", -2):
            return int(doc["beginning_offset"])
        if spec in ("latest", -1):
            return int(doc["end_offset"])
        found = doc.get("timestamp_offset")
        return None if found is None else int(found)


_GROUP_PATHS = (
    re.compile(r"^/v1/groups/(?P<g>[^/]+)"),
    re.compile(r"^/consumers/(?P<g>[^/]+)"),
    re.compile(r"^/v3/clusters/[^/]+/consumer-groups/(?P<g>[^/]+)"),
)
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
#: Marks a group request one broker sent to the group's coordinator: it is never sent on again (the
#: coordinator still forwards the partition work it needs, unlike a request marked FORWARDED_HEADER).
GROUP_PROXY_HEADER = "x-topiclake-group-proxied-by"


class ClusterRouting:
    """ASGI middleware: marks forwarded requests, and proxies group requests to the group's coordinator."""

    def __init__(self, app: ASGIApp, tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self._client: httpx.AsyncClient | None = None
        self._tls = tls
        self._scheme = "http" if tls is None else "https"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        forwarded = FORWARDED_HEADER.encode() in headers
        if not forwarded and GROUP_PROXY_HEADER.encode() not in headers:
            target = self._coordinator(scope)
            if target is not None:
                await self._proxy(scope, receive, send, target)
                return
        token = FORWARDED.set(forwarded)
        try:
            await self.app(scope, receive, send)
        finally:
            FORWARDED.reset(token)

    def _coordinator(self, scope: Scope) -> BrokerEndpoint | None:
        app = scope.get("app")
        broker: Broker | None = getattr(getattr(app, "state", None), "broker", None)
        node = broker.cluster if broker is not None else None
        if node is None:
            return None
        path: str = scope["path"]
        for pattern in _GROUP_PATHS:
            m = pattern.match(path)
            if m:
                coordinator = node.coordinator(m.group("g"))
                if coordinator in (-1, node.broker_id):
                    return None
                return node.endpoint_of(coordinator)
        return None

    async def _proxy(self, scope: Scope, receive: Receive, send: Send, target: BrokerEndpoint) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(90.0, connect=2.0), verify=self._tls if self._tls is not None else True
            )
        body = b""
        while True:
            message: Message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [
            (k.decode(), v.decode())
            for k, v in scope["headers"]
            if k.decode().lower() not in _HOP_HEADERS and k.decode().lower() != PRINCIPAL_HEADER
        ]
        headers.append((GROUP_PROXY_HEADER, "1"))
        sec = security_of(scope.get("app"))
        if sec is not None and sec.signer is not None and PRINCIPAL_KEY in scope:
            # the client's principal, signed: the coordinator checks the ACLs for the client
            signed = sec.signer.sign(scope[PRINCIPAL_KEY], scope[HOST_KEY], scope["method"], scope["path"])
            headers.append((PRINCIPAL_HEADER, signed))
        query = scope.get("query_string", b"").decode()
        url = f"{self._scheme}://{target.host}:{target.port}{scope['path']}" + (f"?{query}" if query else "")
        try:
            response = await self._client.request(scope["method"], url, headers=headers, content=body)
        except httpx.HTTPError as exc:
            err = NotLeader(
                f"the coordinator of this group (broker {target.broker_id}) cannot be reached: {exc}; retry",
                coordinator_id=target.broker_id,
            )
            payload = orjson.dumps({"error": err.to_dict(), "error_code": 50003, "message": err.message})
            start_headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
            await send({"type": "http.response.start", "status": 503, "headers": start_headers})
            await send({"type": "http.response.body", "body": payload})
            return
        out = [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS]
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        await send({"type": "http.response.body", "body": response.content})
