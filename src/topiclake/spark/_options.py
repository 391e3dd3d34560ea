"""Options of the ``topiclake`` Spark source: Kafka's names and meanings, parsed and checked once.

Everything here is plain Python (no pyspark), so it runs the same in the planner worker, on the driver's
stream runner and in tests. Offsets travel as Kafka's JSON, ``{"topic": {"partition": offset}}``, with
``-2`` meaning earliest and ``-1`` latest where a starting or ending offset is given by hand.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from topiclake.errors import InvalidRequest
from topiclake.platform.storage import Storage
from topiclake.spark._option_values import (
    PartitionOffsets,
    TopicPartition,
    _duration_ms,
    _get,
    _json,
    _positive_int,
    _topic,
    offsets_from_json,
    offsets_to_json,
    parse_bool,
    parse_partition_json,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
    "EARLIEST",
    "KAFKA_OPTION_PREFIX",
    "LATEST",
    "STORAGE_OPTION_PREFIX",
    "OffsetBound",
    "PartitionOffsets",
    "ReaderOptions",
    "Subscription",
    "TopicPartition",
    "offsets_from_json",
    "offsets_to_json",
    "parse_bool",
    "parse_options",
    "parse_partition_json",
]

#: ``startingOffsets``/``endingOffsets`` JSON values meaning the log start and the end.
EARLIEST: Final = -2
LATEST: Final = -1

#: Options that carry storage options for delta-rs and pyarrow: ``storage.<key>`` -> ``<key>``.
STORAGE_OPTION_PREFIX: Final = "storage."
#: Options of Spark's Kafka source that configure its Kafka client; accepted and ignored here.
KAFKA_OPTION_PREFIX: Final = "kafka."

DEFAULT_MAX_RECORDS_PER_PARTITION: Final = 200_000
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000


_KNOWN: Final = {
    "warehouse",
    "path",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingoffsets",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "failondataloss",
    "includeheaders",
    "groupid",
    "groupidprefix",
    "minpartitions",
    "maxrecordsperpartition",
    # Kafka source options that mean nothing without a Kafka client; accepted so code keeps running.
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafkaconsumer.polltimeoutms",
}
_STREAM_ONLY: Final = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_BATCH_ONLY: Final = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions a query reads: one of Kafka's ``subscribe``, ``subscribePattern``, ``assign``.

    Attributes:
        kind: The option that was given.
        topics: Subscribed topic names (``subscribe``).
        pattern: Regular expression a whole topic name must match (``subscribePattern``).
        assigned: Fixed partitions (``assign``), sorted.
    """

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def wanted_topics(self, existing: Iterable[str]) -> list[str]:
        """The topics of this subscription among ``existing`` ones (sorted)."""
        names = set(existing)
        if self.kind == "subscribe":
            return sorted(t for t in self.topics if t in names)
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned} & names)
        assert self.pattern is not None
        regex = re.compile(self.pattern)
        return sorted(t for t in names if regex.fullmatch(t))

    def named_topics(self) -> list[str]:
        """Topics named explicitly (``subscribe`` and ``assign``); empty for a pattern."""
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned})
        return list(self.topics)

    def partitions_of(self, topic: str, count: int) -> list[int]:
        """The partitions of ``topic`` (which has ``count``) that this subscription reads."""
        if self.kind == "assign":
            return sorted(p for t, p in self.assigned if t == topic and p < count)
        return list(range(count))


@dataclass(frozen=True)
class OffsetBound:
    """Where reading starts or ends: ``earliest``, ``latest``, offsets, or timestamps.

    Attributes:
        kind: ``earliest`` | ``latest`` | ``offsets`` (per partition, may hold -2/-1) | ``timestamp`` (one
            timestamp in ms for every partition) | ``timestamps`` (per partition, ms).
        offsets: Per-partition offsets (``offsets``) or timestamps (``timestamps``).
        timestamp: The timestamp of ``timestamp``.
        option: The option it came from, for error messages.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None
    option: str = ""

    def as_dict(self) -> PartitionOffsets:
        """Per-partition values of ``offsets``/``timestamps``."""
        return dict(self.offsets)


@dataclass(frozen=True)
class ReaderOptions:
    """Every option of the source, checked.

    Attributes:
        warehouse: Warehouse URI.
        storage_options: Options for delta-rs/pyarrow (``storage.<key>`` options).
        subscription: What to read.
        starting: Where a new query (or a batch read) starts.
        ending: Where a batch read ends (``latest`` for streams).
        max_offsets_per_trigger: Most records per micro-batch (over all partitions).
        min_offsets_per_trigger: Fewest new records a micro-batch waits for (up to ``max_trigger_delay_ms``).
        max_trigger_delay_ms: Longest wait for ``min_offsets_per_trigger``.
        fail_on_data_loss: Fail (True) or warn (False) when records were deleted before they were read.
        include_headers: Add the ``headers`` column.
        group_id: Consumer group that a stream commits its progress to, or None.
        max_records_per_partition: Largest offset range one Spark task reads.
        min_partitions: Fewest Spark tasks a batch of data is split into, or None.
        timestamp_strategy: ``error`` or ``latest``: what a timestamp without a matching offset means.
    """

    warehouse: str
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    storage_options: dict[str, str] = field(default_factory=dict)
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    min_partitions: int | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"

    def storage(self) -> Storage:
        """The warehouse as a :class:`~topiclake.platform.Storage`."""
        return Storage(self.warehouse, self.storage_options)


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {n: _get(options, n) for n in ("subscribe", "subscribePattern", "assign")}
    present = [n for n, v in given.items() if v is not None]
    if len(present) > 1:
        raise InvalidRequest(
            "only one of the options 'subscribe', 'subscribePattern' and 'assign' can be given; got "
            + ", ".join(f"'{n}'" for n in present)
        )
    if not present:
        raise InvalidRequest(
            "one of the options 'subscribe', 'subscribePattern' or 'assign' must be given "
            "(as for Spark's Kafka source), e.g. .option('subscribe', 'orders')"
        )
    kind = present[0]
    raw = given[kind]
    assert raw is not None
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise InvalidRequest(f"no topics to subscribe to: option 'subscribe' is {raw!r}", option=kind)
        return Subscription("subscribe", topics=tuple(_topic(t, kind) for t in topics))
    if kind == "subscribePattern":
        if not raw.strip():
            raise InvalidRequest(
                "pattern to subscribe is empty: option 'subscribePattern' is ''", option=kind
            )
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidRequest(
                f"option 'subscribePattern' is not a valid regular expression ({exc}): {raw!r}", option=kind
            ) from None
        return Subscription("subscribePattern", pattern=raw)
    obj = _json(options, kind, raw)
    shape = f'option \'assign\' must be JSON like {{"topicA": [0, 1], "topicB": [2]}}, not {raw!r}'
    if not isinstance(obj, dict):
        raise InvalidRequest(shape, option=kind)
    assigned: set[TopicPartition] = set()
    for topic, parts in obj.items():
        _topic(topic, kind)
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise InvalidRequest(shape, option=kind)
        assigned.update((topic, p) for p in parts)
    if not assigned:
        raise InvalidRequest(f"no topic partitions to assign: option 'assign' is {raw!r}", option=kind)
    return Subscription("assign", assigned=tuple(sorted(assigned)))


def _offset_bound(
    options: Mapping[str, str],
    offsets_name: str,
    timestamp_name: str,
    by_timestamp_name: str,
    default: Literal["earliest", "latest"],
) -> OffsetBound:
    """Kafka's precedence: one global timestamp, then per-partition timestamps, then offsets."""
    ts = _get(options, timestamp_name)
    if ts is not None:
        try:
            value = int(ts.strip())
        except ValueError:
            value = -1
        if value < 0:
            raise InvalidRequest(
                f"option '{timestamp_name}' must be a timestamp in milliseconds since the epoch, not {ts!r}",
                option=timestamp_name,
            )
        return OffsetBound("timestamp", timestamp=value, option=timestamp_name)
    by_ts = _get(options, by_timestamp_name)
    if by_ts is not None:
        parsed = parse_partition_json(by_timestamp_name, by_ts)
        if any(v < 0 for v in parsed.values()):
            raise InvalidRequest(
                f"option '{by_timestamp_name}' needs timestamps in ms >= 0: {by_ts!r}",
                option=by_timestamp_name,
            )
        return OffsetBound("timestamps", offsets=tuple(sorted(parsed.items())), option=by_timestamp_name)
    raw = _get(options, offsets_name)
    if raw is None:
        return OffsetBound(default, option=offsets_name)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetBound("earliest" if word == "earliest" else "latest", option=offsets_name)
    parsed = parse_partition_json(offsets_name, raw)
    bad = {tp: v for tp, v in parsed.items() if v < EARLIEST}
    if bad:
        raise InvalidRequest(
            f"option '{offsets_name}': offsets must be >= 0, or -2 (earliest) or -1 (latest); got {raw!r}",
            option=offsets_name,
        )
    return OffsetBound("offsets", offsets=tuple(sorted(parsed.items())), option=offsets_name)


def _warehouse(options: Mapping[str, str], default_warehouse: str | None) -> str:
    warehouse = _get(options, "warehouse") or _get(options, "path") or default_warehouse
    if not warehouse:
        raise InvalidRequest(
            "no warehouse: set the option 'warehouse' or the Spark conf 'spark.topiclake.warehouse' "
            "(then call topiclake.spark.register(spark) again)"
        )
    return warehouse


def parse_options(
    options: Mapping[str, str], *, streaming: bool, default_warehouse: str | None = None
) -> ReaderOptions:
    """Parse and check the options of a read, as Spark's Kafka source does.

    Args:
        options: The options given to ``spark.read``/``spark.readStream`` (case-insensitive names).
        streaming: Whether this is a streaming read (``endingOffsets`` is then refused).
        default_warehouse: The session's ``spark.topiclake.warehouse``, used without a ``warehouse`` option.

    Raises:
        InvalidRequest: A missing, conflicting or malformed option, with the option named.
    """
    for key in options:
        lowered = key.lower()
        if lowered not in _KNOWN and not lowered.startswith((STORAGE_OPTION_PREFIX, KAFKA_OPTION_PREFIX)):
            logger.warning("topiclake source: ignoring unknown option %r", key)
    warehouse = _warehouse(options, default_warehouse)
    storage_options = {
        k[len(STORAGE_OPTION_PREFIX) :]: v
        for k, v in options.items()
        if k.lower().startswith(STORAGE_OPTION_PREFIX) and v is not None
    }
    if streaming:
        for name in _BATCH_ONLY:
            if _get(options, name) is not None:
                raise InvalidRequest(
                    f"option '{name}' is not valid in streaming queries (a stream has no end)", option=name
                )
    else:
        for name in _STREAM_ONLY:
            if _get(options, name) is not None:
                logger.warning("topiclake source: option %r applies to streaming queries only; ignored", name)
    subscription = _subscription(options)
    starting = _offset_bound(
        options,
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        default="latest" if streaming else "earliest",
    )
    ending = _offset_bound(options, "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "latest")
    if not streaming:
        if starting.kind == "latest":
            raise InvalidRequest(
                "option 'startingOffsets' can't be latest for batch queries", option="startingOffsets"
            )
        if starting.kind == "offsets" and LATEST in starting.as_dict().values():
            raise InvalidRequest(
                "option 'startingOffsets': -1 (latest) is not valid for batch queries",
                option="startingOffsets",
            )
        if ending.kind == "earliest":
            raise InvalidRequest(
                "option 'endingOffsets' can't be earliest for batch queries", option="endingOffsets"
            )
        if ending.kind == "offsets" and EARLIEST in ending.as_dict().values():
            raise InvalidRequest(
                "option 'endingOffsets': -2 (earliest) is not valid for batch queries", option="endingOffsets"
            )
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidRequest(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}",
            option="startingOffsetsByTimestampStrategy",
        )
    max_per_trigger = _positive_int(options, "maxOffsetsPerTrigger")
    min_per_trigger = _positive_int(options, "minOffsetsPerTrigger")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise InvalidRequest(
            f"option 'minOffsetsPerTrigger' ({min_per_trigger}) must not exceed 'maxOffsetsPerTrigger' "
            f"({max_per_trigger})"
        )
    group_id = _get(options, "groupId")
    if group_id is not None and (not 0 < len(group_id) <= 255 or not group_id.isprintable()):
        raise InvalidRequest(f"option 'groupId' must be 1 to 255 printable characters, not {group_id!r}")
    return ReaderOptions(
        warehouse=warehouse,
        storage_options=storage_options,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
        include_headers=parse_bool(options, "includeHeaders", False),
        group_id=group_id,
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition")
        or DEFAULT_MAX_RECORDS_PER_PARTITION,
        min_partitions=_positive_int(options, "minPartitions"),
        timestamp_strategy="latest" if strategy == "latest" else "error",
    )
