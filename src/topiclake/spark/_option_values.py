"""Single option values of the ``topiclake`` source: booleans, positive ints, durations, topic names, and the
``{topic: {partition: offset}}`` JSON of offsets (also a stream's checkpointed offsets).

Split from :mod:`topiclake.spark._options`, which re-exports the public names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from topiclake.errors import InvalidRequest
from topiclake.platform.catalog.topic_config import validate_topic_name

TopicPartition = tuple[str, int]


#: Offsets per topic partition (the next offset to read, Kafka's meaning).
PartitionOffsets = dict[TopicPartition, int]


_DURATION: Final = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", re.IGNORECASE)


_DURATION_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _get(options: Mapping[str, str], name: str) -> str | None:
    """A case-insensitive option lookup (Spark hands the source a case-insensitive map; plain dicts too)."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return None if value is None else str(value)
    return None


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """A ``true``/``false`` option.

    Raises:
        InvalidRequest: Anything else.
    """
    raw = _get(options, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidRequest(f"option '{name}' must be true or false, not {raw!r}", option=name)
    return value == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidRequest(
            f"option '{name}' must be a positive integer, not {raw!r}", option=name
        ) from None
    if value < 1:
        raise InvalidRequest(f"option '{name}' must be a positive integer, not {raw!r}", option=name)
    return value


def _duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise InvalidRequest(
            f"option '{name}' must be a duration such as 500ms, 30s, 15m or 1h, not {raw!r}", option=name
        )
    unit = (match.group(2) or "ms").lower()
    return int(match.group(1)) * _DURATION_MS[unit]


def _json(options: Mapping[str, str], name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"option '{name}' is not valid JSON ({exc}): {raw!r}", option=name) from None


def _topic(name: str, option: str) -> str:
    try:
        return validate_topic_name(name)
    except InvalidRequest as exc:
        raise InvalidRequest(f"option '{option}': {exc}", option=option) from exc


def parse_partition_json(name: str, raw: str) -> PartitionOffsets:
    """Parse Kafka's per-partition JSON, ``{"topic": {"0": 23, "1": -1}}``.

    Raises:
        InvalidRequest: Not that shape, a bad topic name, or a partition that is not a number >= 0.
    """
    shape = f'option \'{name}\' must be JSON like {{"topicA": {{"0": 23, "1": -1}}}}, not {raw!r}'
    obj = _json({}, name, raw)
    if not isinstance(obj, dict):
        raise InvalidRequest(shape, option=name)
    out: PartitionOffsets = {}
    for topic, parts in obj.items():
        _topic(topic, name)
        if not isinstance(parts, dict):
            raise InvalidRequest(shape, option=name)
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise InvalidRequest(shape, option=name) from None
            if partition < 0 or isinstance(value, bool) or not isinstance(value, int):
                raise InvalidRequest(shape, option=name)
            out[(topic, partition)] = value
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's offsets JSON object, in a stable order (topics by name, partitions by number).

    The order matters: Spark compares a source's offsets by their JSON text.
    """
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(obj: Mapping[str, Any] | None) -> PartitionOffsets:
    """The inverse of :func:`offsets_to_json` (an offset Spark checkpointed, or None for none)."""
    out: PartitionOffsets = {}
    for topic, parts in (obj or {}).items():
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out
