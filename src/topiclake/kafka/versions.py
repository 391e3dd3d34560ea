"""The API keys and versions this listener implements: exactly what ApiVersions advertises."""

from __future__ import annotations

from typing import Final

API_VERSIONS: Final = 18

#: api key -> (min version, max version). Every range is one that kio parses and every client in
#: docs/kafka-protocol.md was tested with. Fetch and FindCoordinator switch librdkafka's RecordBatch v2 and
#: LZ4 on, so they are part of the first set.
SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 4),  # InitProducerId
}


def supported(api_key: int, version: int) -> bool:
    """Whether this listener implements ``version`` of ``api_key``."""
    span = SUPPORTED.get(api_key)
    return span is not None and span[0] <= version <= span[1]
