"""The shapes of the native API's answers, as TypedDicts (what :class:`TopiclakeClient` returns)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Acks = Literal["all", "-1", "1", "0"] | int
Encoding = Literal["json", "binary", "string"]
Assignor = Literal["range", "roundrobin", "sticky", "cooperative-sticky"]
ResetTo = Literal["earliest", "latest", "offset", "timestamp", "shift"]


class BrokerInfo(TypedDict):
    """One broker of the cluster."""

    id: int
    host: str
    port: int
    rack: NotRequired[str | None]
    listeners: NotRequired[dict[str, str]]


class PartitionMetadata(TypedDict):
    """Leadership of one partition."""

    partition: int
    leader: int
    leader_epoch: NotRequired[int]
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
    type: str  # http, classic (Kafka's JoinGroup) or consumer (Kafka's KIP-848)
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
    """``GET /v1/groups/{g}``: Kafka's state name (Empty, Stable, CompletingRebalance, PreparingRebalance;
    a consumer-protocol group's Assigning, Reconciling); ``type`` http, classic or consumer (whose
    ``generation_id`` is the group epoch, a member's its member epoch)."""

    group_id: str
    type: str
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
