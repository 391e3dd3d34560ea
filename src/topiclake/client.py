"""A small synchronous client of the gateway's native HTTP API (``/v1``), over httpx.

Errors come back as the classes of :mod:`topiclake.errors`, rebuilt from the native error body
``{"error": {"code", "message", "retriable", "details"}}``; a code this version does not know becomes a
plain :class:`~topiclake.errors.TopiclakeError` carrying that code. A gateway that cannot be reached raises
:class:`GatewayUnavailable`.

Example::

    with TopiclakeClient("http://127.0.0.1:8082") as tl:
        tl.create_topic("orders", partitions=3)
        tl.produce("orders", [{"key": "k1", "value": {"amount": 3}}])
        batch = tl.fetch("orders", 0, offset=0)
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast
from urllib.parse import quote

import httpx
import orjson

from topiclake import errors
from topiclake.errors import TopiclakeError

__all__ = [
    "Acks",
    "ArrowProduceResponse",
    "Assignor",
    "BrokerInfo",
    "CommittedOffset",
    "Encoding",
    "FetchResponse",
    "FetchedRecord",
    "GatewayUnavailable",
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "GroupMember",
    "Header",
    "HeartbeatResponse",
    "JoinResponse",
    "Metadata",
    "Offsets",
    "PartitionLag",
    "PartitionOffsets",
    "ProduceResponse",
    "ProduceResult",
    "ProducerId",
    "ResetPlan",
    "ResetPlanEntry",
    "ResetTo",
    "Topic",
    "TopicPartition",
    "TopiclakeClient",
    "decode_bytes",
    "error_from_body",
]

Acks = Literal["all", "-1", "1", "0"] | int
Encoding = Literal["json", "binary", "string"]
Assignor = Literal["range", "roundrobin", "sticky", "cooperative-sticky"]
ResetTo = Literal["earliest", "latest", "offset", "timestamp", "shift"]

DEFAULT_URL = "http://127.0.0.1:8082"
NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"


class GatewayUnavailable(TopiclakeError):
    """The gateway could not be reached (connection refused, unknown host, connection reset)."""

    code = "gateway_unavailable"
    retriable = True


# ---------------------------------------------------------------------------------------------- responses


class BrokerInfo(TypedDict):
    """One broker of the cluster."""

    id: int
    host: str
    port: int


class PartitionMetadata(TypedDict):
    """Leadership of one partition."""

    partition: int
    leader: int
    replicas: list[int]
    in_sync_replicas: list[int]


class TopicMetadata(TypedDict):
    """Partitions of one topic in the metadata."""

    name: str
    partitions: list[PartitionMetadata]


class Metadata(TypedDict):
    """``GET /v1/metadata``."""

    cluster_id: str
    controller_id: int
    brokers: list[BrokerInfo]
    topics: list[TopicMetadata]


class PartitionOffsets(TypedDict):
    """Beginning and end offset of one partition."""

    partition: int
    beginning_offset: int
    end_offset: int


class Topic(TypedDict, total=False):
    """A topic: name, id, partition count, every config as a string (``offsets`` when described)."""

    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]
    offsets: list[PartitionOffsets]


class ProducerId(TypedDict):
    """An idempotent producer's id and epoch (``POST /v1/producers``)."""

    producer_id: int
    epoch: int


class RecordError(TypedDict):
    """Why one record was not appended."""

    code: str
    message: str


class ProduceResult(TypedDict):
    """Outcome of one produced record (offset None for acks=0)."""

    partition: int | None
    offset: int | None
    timestamp: int | None
    error: RecordError | None


class ProduceResponse(TypedDict):
    """``POST /v1/topics/{t}/records`` with a JSON body: one result per record, in order."""

    topic: str
    results: list[ProduceResult]


class ArrowProduceResponse(TypedDict):
    """``POST /v1/topics/{t}/records`` with an Arrow IPC body."""

    topic: str
    partition: int
    base_offset: int | None
    count: int


class Header(TypedDict):
    """A record header (value encoded as the fetch's encoding)."""

    key: str
    value: Any


class FetchedRecord(TypedDict):
    """One fetched record; key and value in the fetch's encoding (base64 for ``binary``)."""

    offset: int
    timestamp: int
    timestamp_type: str
    key: Any
    value: Any
    headers: list[Header]


class FetchResponse(TypedDict):
    """``GET /v1/topics/{t}/partitions/{p}/records``."""

    topic: str
    partition: int
    records: list[FetchedRecord]
    next_offset: int
    high_watermark: int
    log_start_offset: int


class Offsets(TypedDict):
    """``GET /v1/topics/{t}/partitions/{p}/offsets`` (``timestamp_offset`` when asked with a timestamp)."""

    beginning_offset: int
    end_offset: int
    timestamp_offset: NotRequired[int | None]


# ---------------------------------------------------------------------------------------------- groups


class TopicPartition(TypedDict):
    """One partition of a topic."""

    topic: str
    partition: int


class GroupListing(TypedDict):
    """A group in ``GET /v1/groups``."""

    group_id: str
    state: str
    members: int
    assignor: str | None


class GroupMember(TypedDict):
    """One member of a described group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    subscription: list[str]
    pattern: str | None
    assignment: list[TopicPartition]
    generation_id: int
    session_timeout_ms: int
    max_poll_interval_ms: int
    last_heartbeat_ms_ago: int


class GroupDescription(TypedDict):
    """``GET /v1/groups/{g}``: Kafka's state name (Empty, Stable, CompletingRebalance, PreparingRebalance)."""

    group_id: str
    state: str
    generation_id: int
    assignor: str | None
    leader: str | None
    members: list[GroupMember]


class JoinResponse(TypedDict):
    """``POST /v1/groups/{g}/members``: the member's id, the generation and its partitions."""

    member_id: str
    generation_id: int
    assignment: list[TopicPartition]
    leader: str | None
    members: list[str]
    assignor: str
    rebalance_in_progress: bool


class HeartbeatResponse(TypedDict):
    """``POST /v1/groups/{g}/members/{m}/heartbeat``: the member's current generation and assignment."""

    generation_id: int
    assignment: list[TopicPartition]
    rebalance_in_progress: bool


class CommittedOffset(TypedDict):
    """A committed offset (the next offset the group reads) and who committed it when."""

    topic: str
    partition: int
    offset: int
    metadata: str | None
    commit_timestamp: int
    member_id: str | None
    generation_id: int


class PartitionLag(TypedDict):
    """Lag of one partition: ``end_offset - committed_offset`` (``end - log start`` and ``estimated``
    when nothing is committed)."""

    topic: str
    partition: int
    committed_offset: int | None
    log_start_offset: int
    end_offset: int
    lag: int
    estimated: bool
    member_id: str | None


class GroupLag(TypedDict):
    """``GET /v1/groups/{g}/lag``."""

    group_id: str
    total_lag: int
    partitions: list[PartitionLag]


class ResetPlanEntry(TypedDict):
    """One partition of an offset reset: the committed offset before and after."""

    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


class ResetPlan(TypedDict):
    """``POST /v1/groups/{g}/offsets/reset``: the plan, applied unless ``dry_run``."""

    group_id: str
    dry_run: bool
    plan: list[ResetPlanEntry]


# ---------------------------------------------------------------------------------------------- errors


def _error_classes() -> dict[str, type[TopiclakeError]]:
    classes: dict[str, type[TopiclakeError]] = {}
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, TopiclakeError) and cls.__module__ == errors.__name__:
            classes[cls.code] = cls
    classes[GatewayUnavailable.code] = GatewayUnavailable
    return classes


_ERROR_CLASSES = _error_classes()


def error_from_body(status: int, body: bytes, retry_after: str | None = None) -> TopiclakeError:
    """Rebuild the error a gateway answered, as its :mod:`topiclake.errors` class.

    Args:
        status: HTTP status of the answer.
        body: The answer's body (the native error shape, or anything else from a proxy in between).
        retry_after: The Retry-After header, if any (seconds), used for :class:`~topiclake.errors.Throttled`.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        text = body.decode("utf-8", errors="replace").strip()[:200] or "(empty body)"
        exc = TopiclakeError(f"HTTP {status}: {text}", status=status)
        exc.retriable = status in (408, 429, 502, 503, 504)
        return exc
    code: str = err["code"]
    message = str(err.get("message") or code)
    raw_details = err.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    cls = _ERROR_CLASSES.get(code, TopiclakeError)
    exc = cls.__new__(cls)
    TopiclakeError.__init__(exc, message, **details)
    if cls is TopiclakeError or cls.code != code:
        exc.code = code
    if isinstance(err.get("retriable"), bool):
        exc.retriable = err["retriable"]
    if isinstance(exc, errors.Throttled):
        retry_ms = details.get("retry_after_ms")
        if not isinstance(retry_ms, int):
            retry_ms = int(retry_after) * 1000 if retry_after and retry_after.isdigit() else 100
        exc.retry_after_ms = retry_ms
    return exc


def decode_bytes(data: str | None, encoding: str = "binary") -> bytes | None:
    """Bytes of a fetched key, value or header value from the fetch's ``encoding`` (default base64)."""
    if data is None:
        return None
    if encoding == "binary":
        return base64.b64decode(data)
    if encoding == "string":
        return data.encode()
    return orjson.dumps(data)


# ---------------------------------------------------------------------------------------------- client


class TopiclakeClient:
    """Synchronous client of the native API of one gateway.

    Args:
        url: Base URL of the gateway.
        timeout: Seconds to wait for an answer (a long-poll fetch adds its ``wait_ms``).
        headers: Extra headers sent with every request (e.g. ``Authorization``).
        transport: An httpx transport (tests).

    The client is thread-safe (one httpx connection pool) and a context manager.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        timeout: float = 30.0,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.url, timeout=timeout, headers=dict(headers or {}), transport=transport
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> TopiclakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        query = {k: v for k, v in (params or {}).items() if v is not None}
        body = orjson.dumps(json) if json is not None else content
        hdrs = dict(headers or {})
        if json is not None:
            hdrs.setdefault("content-type", "application/json")
        try:
            resp = self._http.request(
                method,
                path,
                content=body,
                params=query,
                headers=hdrs,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        if resp.status_code >= 400:
            raise error_from_body(resp.status_code, resp.content, resp.headers.get("retry-after"))
        return resp

    def _transport_error(self, exc: httpx.HTTPError) -> TopiclakeError:
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return errors.RequestTimedOut(f"no answer from {self.url} in time ({exc})", url=self.url)
        if isinstance(exc, httpx.TransportError):
            return GatewayUnavailable(
                f"cannot reach the gateway at {self.url} ({exc or type(exc).__name__}): "
                f"is `topiclake serve` running at {self.url}?",
                url=self.url,
            )
        return TopiclakeError(f"HTTP request to {self.url} failed: {exc}", url=self.url)

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
        return cast(Metadata, self._json("GET", "/v1/metadata"))

    def list_topics(self) -> list[Topic]:
        """Every topic with its partition count and configs."""
        return cast(list[Topic], self._json("GET", "/v1/topics")["topics"])

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str | int] | None = None
    ) -> Topic:
        """Create a topic.

        Raises:
            TopicExists: A topic of that name exists.
            InvalidConfig: A config is unknown or has a bad value.
        """
        body = {
            "name": name,
            "partitions": partitions,
            "configs": {k: str(v) for k, v in (configs or {}).items()},
        }
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

    # ------------------------------------------------------------------ produce

    def produce(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        acks: Acks = "all",
        partition: int | None = None,
        encoding: Encoding = "json",
        producer: Mapping[str, int] | None = None,
    ) -> ProduceResponse:
        """Produce records in one JSON request.

        Args:
            topic: Topic name.
            records: Dicts with ``key``, ``value``, ``headers`` (``{"k": "v"}`` or ``[{"key", "value"}]``),
                ``partition`` and ``timestamp`` (ms), all optional; key and value per ``encoding``.
            acks: ``all`` (after the Delta commit), ``1`` (once the leader has the records) or ``0``.
            partition: Partition for every record without its own.
            encoding: ``json`` (any JSON value, stored as its JSON text), ``binary`` (base64) or ``string``.
            producer: ``{"id", "epoch", "sequence"}`` of an idempotent producer.

        Returns:
            One result per record, in order; a record that failed has ``error`` set (the request as a
            whole raises only when it was refused entirely).
        """
        body: dict[str, Any] = {"records": list(records)}
        if producer is not None:
            body["producer"] = dict(producer)
        params = {"acks": str(acks), "partition": partition, "encoding": encoding}
        return cast(
            ProduceResponse,
            self._json("POST", f"{self._topic_path(topic)}/records", json=body, params=params),
        )

    def produce_stream(
        self,
        topic: str,
        records: Iterable[Mapping[str, Any] | str | bytes],
        *,
        acks: Acks = "all",
        partition: int | None = None,
        encoding: Encoding = "json",
    ) -> Iterator[ProduceResult]:
        """Produce newline-delimited JSON records in one streamed request; yield one result per record.

        ``records`` are dicts or ready NDJSON lines (``str``/``bytes``, without or with the newline). The
        body is sent as it is generated; the results are read after it (they come in order).
        """

        def lines() -> Iterator[bytes]:
            for r in records:
                if isinstance(r, bytes):
                    line = r
                elif isinstance(r, str):
                    line = r.encode()
                else:
                    line = orjson.dumps(r)
                yield line if line.endswith(b"\n") else line + b"\n"

        params = {
            k: v
            for k, v in {"acks": str(acks), "partition": partition, "encoding": encoding}.items()
            if v is not None
        }
        request = self._http.build_request(
            "POST",
            f"{self._topic_path(topic)}/records",
            content=lines(),
            params=params,
            headers={"content-type": NDJSON, "accept": NDJSON},
        )
        try:
            resp = self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        try:
            if resp.status_code >= 400:
                resp.read()
                raise error_from_body(resp.status_code, resp.content, resp.headers.get("retry-after"))
            for line in resp.iter_lines():
                if line.strip():
                    yield cast(ProduceResult, orjson.loads(line))
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        finally:
            resp.close()

    def produce_arrow(
        self, topic: str, partition: int, ipc_stream: bytes, *, acks: Acks = "all"
    ) -> ArrowProduceResponse:
        """Produce an Arrow IPC stream (columns ``key``, ``value`` as binary; optional ``headers``,
        ``timestamp_ms``) to one partition."""
        return cast(
            ArrowProduceResponse,
            self._json(
                "POST",
                f"{self._topic_path(topic)}/records",
                content=ipc_stream,
                params={"acks": str(acks), "partition": partition},
                headers={"content-type": ARROW_STREAM},
            ),
        )

    # ------------------------------------------------------------------ fetch and offsets

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int = 500,
        max_bytes: int = 1024 * 1024,
        wait_ms: int = 0,
        encoding: Encoding = "binary",
    ) -> FetchResponse:
        """Committed records of one partition from ``offset`` on.

        ``wait_ms`` long-polls: the gateway answers when records arrive or the time is up.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or beyond the end (``details`` has both).
        """
        params = {
            "offset": offset,
            "max_records": max_records,
            "max_bytes": max_bytes,
            "wait_ms": wait_ms,
            "encoding": encoding,
        }
        return cast(
            FetchResponse,
            self._json(
                "GET",
                f"{self._topic_path(topic)}/partitions/{partition}/records",
                params=params,
                timeout=self.timeout + wait_ms / 1000,
            ),
        )

    def fetch_arrow(self, topic: str, partition: int, offset: int, **params: int) -> bytes:
        """Like :meth:`fetch`, but the records as an Arrow IPC stream of the topic table's columns."""
        resp = self._request(
            "GET",
            f"{self._topic_path(topic)}/partitions/{partition}/records",
            params={"offset": offset, **params},
            headers={"accept": ARROW_STREAM},
            timeout=self.timeout + params.get("wait_ms", 0) / 1000,
        )
        return resp.content

    def offsets(self, topic: str, partition: int, timestamp: int | None = None) -> Offsets:
        """Beginning and end offset of a partition, and the first offset at or after ``timestamp`` (ms)."""
        return cast(
            Offsets,
            self._json(
                "GET",
                f"{self._topic_path(topic)}/partitions/{partition}/offsets",
                params={"timestamp": timestamp},
            ),
        )

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[GroupListing]:
        """Every group with members or committed offsets, by id."""
        return cast(list[GroupListing], self._json("GET", "/v1/groups")["groups"])

    def describe_group(self, group: str) -> GroupDescription:
        """State, generation, assignor, leader, members and their assignments.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        return cast(GroupDescription, self._json("GET", self._group_path(group)))

    def delete_group(self, group: str) -> None:
        """Delete a group and its committed offsets.

        Raises:
            GroupNotFound: No such group.
            GroupNotEmpty: The group has active members.
        """
        self._request("DELETE", self._group_path(group))

    def join_group(
        self,
        group: str,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        member_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "consumer",
        session_timeout_ms: int = 45_000,
        max_poll_interval_ms: int = 300_000,
        assignor: Assignor = "range",
    ) -> JoinResponse:
        """Join a group (or rejoin with a known ``member_id``), subscribing to ``topics`` or a ``pattern``.

        Then heartbeat (about every ``session_timeout_ms / 3``) and adopt the assignment each heartbeat
        answers.

        Raises:
            InvalidRequest: Bad group id, subscription, timeouts or assignor.
            InconsistentGroupProtocol: The group's members use another assignor.
            UnknownMemberId: ``member_id`` is not in the group (join again without one).
        """
        body: dict[str, Any] = {
            "topics": list(topics) if topics is not None else None,
            "pattern": pattern,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "client_id": client_id,
            "session_timeout_ms": session_timeout_ms,
            "max_poll_interval_ms": max_poll_interval_ms,
            "assignor": assignor,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return cast(JoinResponse, self._json("POST", self._group_path(group) + "/members", json=body))

    def heartbeat(
        self, group: str, member_id: str, generation_id: int, *, poll: bool = False
    ) -> HeartbeatResponse:
        """Keep a member alive; answers its current generation and assignment.

        Args:
            group: Group id.
            member_id: The member's id from :meth:`join_group`.
            generation_id: The generation of the last answer (confirms the member adopted it).
            poll: The member fetched since the last heartbeat (resets ``max.poll.interval.ms``).

        Raises:
            GroupNotFound, UnknownMemberId: Join again without a member id.
            IllegalGeneration: The generation is stale: join again (with the member id).
        """
        path = f"{self._group_path(group)}/members/{quote(member_id, safe='')}/heartbeat"
        return cast(
            HeartbeatResponse, self._json("POST", path, json={"generation_id": generation_id, "poll": poll})
        )

    def leave_group(self, group: str, member_id: str) -> None:
        """Leave a group; the other members rebalance.

        Raises:
            GroupNotFound, UnknownMemberId: No such group or member.
        """
        self._request("DELETE", f"{self._group_path(group)}/members/{quote(member_id, safe='')}")

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int | tuple[int, str | None]],
        *,
        member_id: str | None = None,
        generation_id: int = -1,
    ) -> list[TopicPartition]:
        """Commit offsets (the next offset to read per partition), fenced by the member's generation.

        Without ``member_id`` this is a simple commit, allowed only while the group has no members.

        Args:
            group: Group id.
            offsets: ``{(topic, partition): offset}`` or ``{(topic, partition): (offset, metadata)}``.
            member_id: The committing member.
            generation_id: That member's generation.

        Returns:
            The committed partitions.

        Raises:
            IllegalGeneration, UnknownMemberId: Stale member: join again.
            RebalanceInProgress: A partition moved to another member: heartbeat for the new assignment.
            OffsetOutOfRange: An offset beyond the partition's end.
            GroupNotEmpty: A simple commit to a group with members.
        """
        entries = []
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, None)
            entries.append({"topic": topic, "partition": partition, "offset": offset, "metadata": metadata})
        body: dict[str, Any] = {"offsets": entries, "generation_id": generation_id}
        if member_id is not None:
            body["member_id"] = member_id
        doc = self._json("POST", self._group_path(group) + "/offsets", json=body)
        return [{"topic": c["topic"], "partition": c["partition"]} for c in doc["committed"]]

    def committed_offsets(self, group: str, topic: str | None = None) -> list[CommittedOffset]:
        """The committed offsets of a group (of one topic if given), sorted by topic and partition.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        doc = self._json("GET", self._group_path(group) + "/offsets", params={"topic": topic})
        return cast(list[CommittedOffset], doc["offsets"])

    def group_lag(self, group: str, topic: str | None = None) -> GroupLag:
        """Lag per partition the group committed for or is assigned, and the total.

        Raises:
            GroupNotFound: No members and no committed offsets.
        """
        return cast(GroupLag, self._json("GET", self._group_path(group) + "/lag", params={"topic": topic}))

    def reset_offsets(
        self,
        group: str,
        to: ResetTo,
        value: int | None = None,
        *,
        topics: Sequence[str] | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        dry_run: bool = False,
    ) -> ResetPlan:
        """``kafka-consumer-groups --reset-offsets``, clamped to each partition's [log start, end].

        Args:
            group: Group id.
            to: ``earliest``, ``latest``, ``offset``, ``timestamp`` (ms) or ``shift`` (by ``value``).
            value: The offset, timestamp or shift (may be negative) for those three.
            topics: Every partition of these topics.
            partitions: These partitions. With neither, every partition the group committed for.
            dry_run: Only answer the plan.

        Raises:
            GroupNotEmpty: The group has active members.
            GroupNotFound: No scope given and the group has no committed offsets.
            InvalidRequest: Bad ``to``/``value``, or a shift of a partition with nothing committed.
        """
        body: dict[str, Any] = {"to": to, "dry_run": dry_run}
        if value is not None:
            body["value"] = value
        if topics is not None:
            body["topics"] = list(topics)
        if partitions is not None:
            body["partitions"] = [{"topic": t, "partition": p} for t, p in partitions]
        return cast(ResetPlan, self._json("POST", self._group_path(group) + "/offsets/reset", json=body))
