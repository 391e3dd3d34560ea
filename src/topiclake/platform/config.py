"""Typed settings of a broker's core (no environment variables here: the edge fills these in)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BrokerConfig(BaseModel):
    """Tuning of one broker's partition logs.

    Kafka's names where they exist (``linger.ms`` -> ``linger_ms``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    broker_id: int = Field(0, ge=0, description="This broker's id in metadata.")
    linger_ms: float = Field(
        2.0, ge=0, description="How long a flush waits for more records before it commits."
    )
    batch_max_records: int = Field(
        200_000, ge=1, description="A flush commits at once when this many records are pending."
    )
    batch_max_bytes: int = Field(
        32 * 1024 * 1024, ge=1, description="A flush commits at once when this many bytes are pending."
    )
    buffer_max_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description="Bytes accepted but not yet committed, over all topics; beyond it producers are "
        "throttled (told to retry), never dropped.",
    )
    tail_cache_bytes: int = Field(
        8 * 1024 * 1024, ge=0, description="Recent committed bytes kept in memory per partition for fetches."
    )
    read_cache_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Decoded small data files (<= 256 KiB) kept in memory per broker for fetches that "
        "re-read history (0: off); see platform/log/file_cache.py.",
    )
    commit_attempts: int = Field(
        20, ge=1, description="How often one flush is tried against conflicting or failing commits."
    )
    request_timeout_ms: int = Field(
        30_000, ge=1, description="How long an acks=all produce waits for its commit."
    )
    maintenance: bool = Field(
        True,
        description="Keep topic tables lean while producing: checkpoints, log cleanup, compaction, vacuum "
        "(a background thread per broker). Off: delta-rs checkpoints in the commit path and nothing is "
        "compacted.",
    )
    local_append: bool = Field(
        True,
        description="On a local warehouse with maintenance on, commit appends by writing the Parquet file "
        "and the Delta log entry directly (put-if-absent by link) instead of through delta-rs's commit "
        "(~4x cheaper per commit; see docs/decisions.md). Off: every commit goes through delta-rs.",
    )
    object_append: bool = Field(
        True,
        description="On an S3 warehouse with maintenance on, whose conditional put the start-up probe "
        "found honoured and with static keys, commit appends with the broker's own requests: the Parquet "
        "files PUT in parallel, then the Delta log entry as one conditional PUT (If-None-Match), instead "
        "of delta-rs's ~10 round trips per commit (see docs/object-storage.md). Off: delta-rs commits.",
    )
    object_linger_max_ms: float = Field(
        250.0,
        ge=0,
        description="On object storage a flush lingers on while requests keep arriving, up to this long in "
        "all: a commit costs a PUT per partition whatever it carries, so fewer, larger commits when more "
        "is in flight than one commit takes (0: only linger_ms and the store's round trip).",
    )
    object_pipeline_max_bytes: int = Field(
        0,
        ge=0,
        description="On object storage a flush that gathered less than this (and did not linger on) is "
        "committed as two commits whose round trips overlap: the second's data files are stored while the "
        "first's log entry is PUT, and the producers the first acknowledges are gathered, and their files "
        "stored, while the second's entry is PUT. Twice the PUTs per MB; measured no faster on the local "
        "S3 server at +20 ms (docs/object-storage.md), so off by default (0: never).",
    )
    maintenance_interval_ms: int = Field(500, ge=10, description="How often maintenance looks at each topic.")
    object_idle_round_ms: int = Field(
        60_000,
        ge=1000,
        description="On object storage, how often maintenance still looks at a topic table that committed "
        "nothing (other writers' commits, checkpoints due): each look is a LIST and a GET or two, billed.",
    )
    checkpoint_interval: int = Field(20, ge=1, description="Versions between Delta checkpoints.")
    log_retention_ms: int = Field(
        10_000,
        ge=0,
        description="Delta log entries older than this (and than the last checkpoint) are deleted: the "
        "Delta time-travel window. Longer windows keep more files in _delta_log and slow every commit.",
    )
    offsets_history_ms: int = Field(
        60_000,
        ge=0,
        description="How often the leader of a topic's partition 0 records every partition's log start and "
        "end offsets in _system/partition_offsets (when they changed): the topic's own time travel, to "
        "within this interval, beyond the short Delta log window (docs/sql.md). 0: never.",
    )
    compact_min_files: int = Field(
        16, ge=2, description="Compact a (partition, segment) once it has this many small files."
    )
    compact_target_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Target size of compacted files (files under 1/4 are small)."
    )
    vacuum_interval_ms: int = Field(
        300_000, ge=1000, description="How often unreferenced files are vacuumed."
    )
    vacuum_retention_hours: int = Field(
        1, ge=0, description="Files unreferenced for less than this are kept for readers still using them."
    )
    fsync: bool = Field(
        False,
        description="fsync data and log files of every commit on a local warehouse (survives an OS crash, "
        "not only a process crash; costs ~0.3-0.5 ms per file).",
    )
    heartbeat_interval_ms: int = Field(
        2_000,
        ge=50,
        description="Cluster: how often this broker heartbeats into the warehouse (on object storage "
        "also how often it lists _system/brokers/: one PUT and one LIST per interval).",
    )
    session_timeout_ms: int = Field(
        6_000,
        ge=200,
        description="Cluster: a broker whose heartbeat has not moved this long is dead and loses its "
        "partitions to live replicas.",
    )
    leader_rebalance_delay_ms: int = Field(
        3_000,
        ge=0,
        description="Cluster: a returning broker takes its preferred partitions back once alive this long.",
    )
    auto_create_topics_enable: bool = Field(
        True,
        description="Kafka's auto.create.topics.enable: a topic that does not exist is created (with "
        "num_partitions partitions and the default replication factor) when a Kafka client's Metadata "
        "request allows it or a record is produced to it over HTTP; with auth on, the principal needs "
        "Create on the cluster or the topic. Off: such requests fail as Kafka's do (unknown topic).",
    )
    num_partitions: int = Field(
        1, ge=1, le=10_000, description="Kafka's num.partitions: the partitions of an auto-created topic."
    )
    default_replication_factor: int = Field(
        3,
        ge=1,
        description="Cluster: replication factor of a topic created without one, capped at the number of "
        "live brokers (with shared storage a replica costs no copy: it is a broker able to lead).",
    )
    rack: str | None = Field(
        None,
        description="Cluster: this broker's rack, reported in metadata; when every live broker has one, "
        "replicas of a partition are spread over racks (Kafka's rack-aware assignment).",
    )
    consumer_group_session_timeout_ms: int = Field(
        45_000,
        ge=1_000,
        description="Kafka's group.consumer.session.timeout.ms: a member of a consumer-protocol (KIP-848) "
        "group that sends no heartbeat for this long is removed and its partitions reassigned.",
    )
    consumer_group_heartbeat_interval_ms: int = Field(
        5_000,
        ge=100,
        description="Kafka's group.consumer.heartbeat.interval.ms: how often members of a consumer-protocol "
        "group heartbeat (they learn new assignments and released partitions that way).",
    )
    transaction_version: int = Field(
        2,
        ge=0,
        le=2,
        description="Kafka's transaction.version feature, finalized in ApiVersions: 2 (KIP-890 part 2) lets "
        "Kafka 4.x clients add partitions and groups to a transaction with their first Produce v12 / "
        "TxnOffsetCommit v5 and bumps the producer epoch at every EndTxn v5 (a late request of an ended "
        "transaction is fenced); 0 or 1: the classic protocol only (Produce <= v9, EndTxn and "
        "TxnOffsetCommit <= v3 advertised). Set the same on every broker; clients read it when they connect.",
    )
    forward_timeout_ms: int = Field(
        12_000,
        ge=100,
        description="Cluster: how long a request for a partition another broker leads keeps looking for a "
        "leader that answers (a dead leader is replaced within the session timeout) before NotLeader.",
    )
