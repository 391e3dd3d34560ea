"""The one error hierarchy of topiclake.

Every error has a stable ``code`` (used by the HTTP layer and the CLI) and a ``retriable`` flag that tells a
client whether sending the same request again may succeed. Errors carry the data that explains them.
Foreign errors (deltalake, pyarrow, OSError) are translated once, where they are raised, with
``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any


class TopiclakeError(Exception):
    """Base of every error topiclake raises on purpose.

    Attributes:
        code: Stable machine-readable name of the error.
        retriable: Whether the same request may succeed if sent again.
        details: Data that explains the error (topic, partition, offset, ...).
    """

    code = "topiclake_error"
    retriable = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        """Return the error as a JSON-ready dict: code, message, retriable and details.

        Details often echo the client's input (a partition count, a list index, a config value), so they are
        made encodable by any JSON library: integers outside 64 bits, non-finite floats, bytes and other
        objects become strings, mapping keys become strings.
        """
        return {
            "code": self.code,
            "message": self.message,
            "retriable": self.retriable,
            **({"details": json_safe(self.details)} if self.details else {}),
        }


_INT64 = 1 << 63


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` with everything a strict JSON encoder (orjson: 64-bit integers, finite floats) refuses
    turned into strings; containers are copied, nesting is cut at 32 levels."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if depth >= 32:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class InvalidRequest(TopiclakeError):
    """The request is malformed or asks for something that cannot be."""

    code = "invalid_request"


class InvalidTopicName(InvalidRequest):
    """A topic name breaks Kafka's rules (``[a-zA-Z0-9._-]``, 1-249 characters, not ``.`` or ``..``)."""

    code = "invalid_topic_name"


class InvalidConfig(InvalidRequest):
    """A topic config is unknown or has a bad value."""

    code = "invalid_config"


class InvalidSettings(TopiclakeError):
    """A process's settings would break it (refused at start, with the reason)."""

    code = "invalid_settings"


class InvalidPartitions(InvalidRequest):
    """A partition count is not allowed (below 1, or a decrease)."""

    code = "invalid_partitions"


class InvalidRecord(InvalidRequest):
    """A record cannot be appended as it is (bad key, value, header or timestamp)."""

    code = "invalid_record"


class RecordTooLarge(InvalidRecord):
    """A record is larger than the topic's ``max.message.bytes``."""

    code = "record_too_large"


class TopicNotFound(TopiclakeError):
    """The topic does not exist."""

    code = "topic_not_found"


class TopicExists(TopiclakeError):
    """A topic of that name exists already."""

    code = "topic_exists"


class PartitionNotFound(TopiclakeError):
    """The topic has no such partition."""

    code = "partition_not_found"


class OffsetOutOfRange(TopiclakeError):
    """The offset is below the log start offset or beyond the end of the partition."""

    code = "offset_out_of_range"


class DataLoss(OffsetOutOfRange):
    """Records a reader had not read yet were deleted (by retention, or with their topic) before it read them.

    Readers with ``failOnDataLoss=false`` log it and go on from the new log start instead.
    """

    code = "data_loss"


class NotLeader(TopiclakeError):
    """This broker does not (or no longer) lead the partition; refresh metadata and retry there."""

    code = "not_leader"
    retriable = True


class InvalidReplicationFactor(InvalidRequest):
    """More replicas asked for than there are live brokers (Kafka's INVALID_REPLICATION_FACTOR)."""

    code = "invalid_replication_factor"


class BrokerIdInUse(TopiclakeError):
    """Another live broker already holds this broker id in the cluster."""

    code = "broker_id_in_use"


class CommitConflict(TopiclakeError):
    """A Delta commit lost against a concurrent one and could not be retried."""

    code = "commit_conflict"
    retriable = True


class StorageError(TopiclakeError):
    """The warehouse could not be read or written."""

    code = "storage_error"
    retriable = True


class Throttled(TopiclakeError):
    """The broker's buffers are full; retry after ``retry_after_ms``."""

    code = "throttled"
    retriable = True

    def __init__(self, message: str, retry_after_ms: int = 100, **details: Any) -> None:
        super().__init__(message, retry_after_ms=retry_after_ms, **details)
        self.retry_after_ms = retry_after_ms


class RequestTimedOut(TopiclakeError):
    """The request did not complete in time; its outcome is unknown, retry with the same sequence."""

    code = "request_timed_out"
    retriable = True


class OutOfOrderSequence(TopiclakeError):
    """An idempotent producer's sequence number skips ahead of what the partition expects."""

    code = "out_of_order_sequence"


class InvalidProducerEpoch(TopiclakeError):
    """An idempotent producer's epoch is older than the partition has seen: this producer was fenced."""

    code = "invalid_producer_epoch"


class TransactionError(TopiclakeError):
    """A transactional producer's request does not fit its transaction (Kafka's transaction errors)."""

    code = "transaction_error"


class InvalidTxnState(TransactionError):
    """The request does not fit the transaction's state (e.g. EndTxn with no transaction open)."""

    code = "invalid_txn_state"


class ProducerFenced(TransactionError):
    """A newer instance of the transactional id (a higher epoch) exists: this one is a zombie."""

    code = "producer_fenced"


class InvalidProducerIdMapping(TransactionError):
    """The transactional id is unknown, or is mapped to another producer id."""

    code = "invalid_producer_id_mapping"


class ConcurrentTransactions(TransactionError):
    """The transactional id's previous transaction is still being completed; retry."""

    code = "concurrent_transactions"
    retriable = True


class InvalidTransactionTimeout(TransactionError):
    """The transaction timeout is not within 1 ms .. the broker's ``transaction.max.timeout.ms``."""

    code = "invalid_transaction_timeout"


class Unauthorized(TopiclakeError):
    """No valid credentials were presented."""

    code = "unauthorized"


class Forbidden(TopiclakeError):
    """The principal may not perform this operation on this resource."""

    code = "forbidden"


class BrokerClosed(TopiclakeError):
    """The broker is shutting down or closed."""

    code = "broker_closed"
    retriable = True


class SqlError(TopiclakeError):
    """Spark could not run a SQL statement; the message is the first line of Spark's error."""

    code = "sql_error"


# -- consumer groups ---------------------------------------------------------------------------------------


class GroupNotFound(TopiclakeError):
    """The consumer group has no members and no committed offsets (or was deleted)."""

    code = "group_not_found"


class UnknownMemberId(TopiclakeError):
    """The member is not (or no longer) in the group, e.g. its session expired: join again without an id."""

    code = "unknown_member_id"


class IllegalGeneration(TopiclakeError):
    """The member's generation is stale: the group rebalanced without it. Join the group again."""

    code = "illegal_generation"


#: Another name for :class:`IllegalGeneration` (KIP-848 calls it a stale member epoch).
StaleGeneration = IllegalGeneration


class RebalanceInProgress(TopiclakeError):
    """The group rebalanced since the member last heard: heartbeat to learn the new assignment, then retry."""

    code = "rebalance_in_progress"
    retriable = True


class GroupNotEmpty(TopiclakeError):
    """The operation needs a group without active members (reset offsets, delete, simple commit)."""

    code = "group_not_empty"


class InconsistentGroupProtocol(TopiclakeError):
    """The member asks for an assignor other than the one the group's members use."""

    code = "inconsistent_group_protocol"


class NoOffsetForPartition(OffsetOutOfRange):
    """The group has no committed offset for the partition and ``auto.offset.reset`` is ``none``."""

    code = "no_offset_for_partition"


class ConsumerInstanceNotFound(TopiclakeError):
    """No such consumer instance (REST Proxy v2) in the group; it may have been removed when idle."""

    code = "consumer_instance_not_found"


class RecordSchemaMismatch(InvalidRecord):
    """A record does not match its schema, or names a schema id that is not registered."""

    code = "record_schema_mismatch"


class SchemaMissing(InvalidRequest):
    """A schema-format produce has keys or values but names no schema for them."""

    code = "schema_missing"
