"""Kafka error codes and the mapping from topiclake's errors to them."""

from __future__ import annotations

import logging

from topiclake import errors as tl

logger = logging.getLogger(__name__)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87

_BY_CLASS: list[tuple[type[tl.TopiclakeError], int]] = [
    (tl.RecordTooLarge, MESSAGE_TOO_LARGE),
    (tl.InvalidTopicName, INVALID_TOPIC_EXCEPTION),
    (tl.InvalidConfig, INVALID_CONFIG),
    (tl.InvalidPartitions, INVALID_PARTITIONS),
    (tl.InvalidRecord, INVALID_RECORD),
    (tl.InvalidReplicationFactor, INVALID_REPLICATION_FACTOR),
    (tl.InvalidRequest, INVALID_REQUEST),
    (tl.TopicNotFound, UNKNOWN_TOPIC_OR_PARTITION),
    (tl.PartitionNotFound, UNKNOWN_TOPIC_OR_PARTITION),
    (tl.TopicExists, TOPIC_ALREADY_EXISTS),
    (tl.OffsetOutOfRange, OFFSET_OUT_OF_RANGE),
    (tl.NotLeader, NOT_LEADER_OR_FOLLOWER),
    (tl.CommitConflict, NOT_LEADER_OR_FOLLOWER),
    (tl.StorageError, KAFKA_STORAGE_ERROR),
    (tl.Throttled, REQUEST_TIMED_OUT),
    (tl.RequestTimedOut, REQUEST_TIMED_OUT),
    (tl.OutOfOrderSequence, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (tl.InvalidProducerEpoch, INVALID_PRODUCER_EPOCH),
    (tl.BrokerClosed, NOT_LEADER_OR_FOLLOWER),
    (tl.GroupNotFound, GROUP_ID_NOT_FOUND),
    (tl.UnknownMemberId, UNKNOWN_MEMBER_ID),
    (tl.IllegalGeneration, ILLEGAL_GENERATION),
    (tl.RebalanceInProgress, REBALANCE_IN_PROGRESS),
    (tl.GroupNotEmpty, NON_EMPTY_GROUP),
    (tl.InconsistentGroupProtocol, INCONSISTENT_GROUP_PROTOCOL),
]


def code_for(exc: BaseException) -> int:
    """The Kafka error code for an exception (UNKNOWN_SERVER_ERROR for anything unexpected, logged)."""
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    logger.error("kafka: unexpected error answered as UNKNOWN_SERVER_ERROR", exc_info=exc)
    return UNKNOWN_SERVER_ERROR
