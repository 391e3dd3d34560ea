"""The API keys and versions this listener implements: exactly what ApiVersions advertises."""

from __future__ import annotations

from typing import Final

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
#: What a connection may send before it authenticated (with auth on); anything else closes it.
BEFORE_AUTHENTICATION: Final = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})

#: api key -> (min version, max version). Every range is one that kio parses and every client in
#: docs/kafka-protocol.md was tested with. Fetch and FindCoordinator switch librdkafka's RecordBatch v2 and
#: LZ4 on, so they are part of the first set.
SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    0: (3, 12),  # Produce (v12: a transactional batch adds its partition, transaction version 2)
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 3),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (1, 1),  # SaslHandshake (v1: SaslAuthenticate frames; the unframed v0 flow is not offered)
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 4),  # InitProducerId (with a transactional id: classic transactions; v5+ is KIP-890/939)
    24: (0, 3),  # AddPartitionsToTxn (v4+ is broker-to-broker only)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn (v5: transaction version 2, the epoch bumped at every end and answered)
    27: (1, 2),  # WriteTxnMarkers (an administrator's abort; no markers in the logs: handlers/txn_admin.py)
    28: (0, 5),  # TxnOffsetCommit (v5: adds the group to the transaction, transaction version 2)
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    44: (0, 1),  # IncrementalAlterConfigs
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions (v2 adds a name pattern filter)
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848; v1: the client names its member id, topic regex)
    69: (0, 1),  # ConsumerGroupDescribe
}


#: What a broker whose ``transaction_version`` is below 2 advertises instead (the classic protocol only:
#: Produce v10-v11 and EndTxn/TxnOffsetCommit v4 bring nothing else, and are left out with it).
CLASSIC: Final[dict[int, tuple[int, int]]] = {0: (3, 9), 26: (0, 3), 28: (0, 3)}

#: The feature that switches Kafka 4.x clients to KIP-890 part 2, and its levels (2: version 2).
TRANSACTION_VERSION: Final = "transaction.version"
TRANSACTION_VERSION_MAX: Final = 2


def advertised(transaction_version: int) -> dict[int, tuple[int, int]]:
    """The versions a listener advertises and serves at this ``transaction.version`` feature level."""
    if transaction_version >= TRANSACTION_VERSION_MAX:
        return dict(SUPPORTED)
    return {**SUPPORTED, **CLASSIC}


_ADVERTISED = {level: advertised(level) for level in range(TRANSACTION_VERSION_MAX + 1)}


def supported(api_key: int, version: int, transaction_version: int = TRANSACTION_VERSION_MAX) -> bool:
    """Whether this listener implements ``version`` of ``api_key`` (at the given feature level)."""
    span = _ADVERTISED[min(max(transaction_version, 0), TRANSACTION_VERSION_MAX)].get(api_key)
    return span is not None and span[0] <= version <= span[1]
