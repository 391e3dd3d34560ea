"""A broker: the topic catalog plus the logs of the partitions it leads, behind one typed API.

This is what the HTTP gateway, the CLI and the tests talk to. It holds no HTTP and no Spark.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.errors import (
    BrokerClosed,
    InvalidRecord,
    InvalidReplicationFactor,
    NotLeader,
    PartitionNotFound,
    RecordTooLarge,
    RequestTimedOut,
    TopiclakeError,
    TopicNotFound,
)
from topiclake.platform.append_handle import results_of
from topiclake.platform.budget import MemoryBudget
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.cluster.metadata import BrokerEndpoint, ClusterMetadata, Endpoint, PartitionState
from topiclake.platform.cluster.node import ClusterNode, Leadership
from topiclake.platform.cluster.router import Router
from topiclake.platform.cluster.routing import Forwarder
from topiclake.platform.config import BrokerConfig
from topiclake.platform.group_coordinator import GroupCoordinator
from topiclake.platform.maintenance import Maintenance
from topiclake.platform.partitioner import Partitioner
from topiclake.platform.records import (
    INPUT_SCHEMA,
    FetchResult,
    ProducerInfo,
    Record,
    RecordResult,
    normalize_acks,
    records_to_arrow,
)
from topiclake.platform.storage import Storage
from topiclake.platform.topic_config import TopicConfig
from topiclake.platform.topic_log import AppendHandle, TopicLog
from topiclake.platform.topic_view import OffsetSpec

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class Broker:
    """One broker over a warehouse: topics admin, produce, fetch, list offsets.

    Args:
        storage: The warehouse.
        config: Broker tuning; defaults if omitted.
        forwarder: How to reach other brokers of the cluster (the gateway supplies an HTTP one); with
            it, produce and fetch for partitions another broker leads are forwarded there.
    """

    def __init__(
        self, storage: Storage, config: BrokerConfig | None = None, *, forwarder: Forwarder | None = None
    ) -> None:
        self.storage = storage
        storage.verify_commit_safety()  # object storage: refuse a store that cannot fence two writers
        self.config = config or BrokerConfig()
        self.catalog = TopicCatalog(storage)
        self.budget = MemoryBudget(self.config.buffer_max_bytes)
        self.partitioner = Partitioner()
        self._logs: dict[str, TopicLog] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._listeners: dict[str, Endpoint] = {}
        self.cluster: ClusterNode | None = None
        self.forwarder = forwarder
        self.router: Router | None = None
        #: Checks records of topics with ``confluent.*.schema.validation=true`` (set by the schema
        #: registry's owner): one error or None per row of the input table.
        self.schema_check: Callable[[str, TopicConfig, pa.Table], list[TopiclakeError | None]] | None = None
        self.groups = GroupCoordinator(self)
        self._maintenance: Maintenance | None = None
        if self.config.maintenance:
            self._maintenance = Maintenance(lambda: [log.maintainer for log in self.open_logs()], self.config)
            self._maintenance.start()
        logger.info("broker %d serving warehouse %s", self.config.broker_id, storage.root)

    @property
    def cluster_id(self) -> str:
        """A stable id of the cluster: every broker over the same warehouse reports the same one."""
        digest = hashlib.sha256(self.storage.root.encode()).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    # ------------------------------------------------------------------ cluster view

    def advertise(self, endpoint: Endpoint) -> None:
        """Register a listener of this broker (``http``, ``kafka``, ...) under its advertised address."""
        with self._lock:
            self._listeners[endpoint.name] = endpoint

    def listeners(self) -> tuple[Endpoint, ...]:
        """The listeners registered so far, by name."""
        with self._lock:
            return tuple(self._listeners[name] for name in sorted(self._listeners))

    def endpoint(self) -> BrokerEndpoint:
        """This broker as metadata reports it (HTTP host and port default to 127.0.0.1:8082)."""
        listeners = self.listeners()
        http = next((e for e in listeners if e.name == "http"), Endpoint("http", "127.0.0.1", 8082))
        return BrokerEndpoint(self.config.broker_id, http.host, http.port, None, listeners)

    def join_cluster(self) -> None:
        """Join the cluster of brokers over this warehouse (DESIGN.md §8).

        Registers this broker (refusing an id a live broker holds), takes part in controller election, and
        from then on leads only the partitions the controller gives it.

        Raises:
            BrokerIdInUse: A live broker already holds this broker id.
        """
        if self.cluster is not None:
            return
        node = ClusterNode(
            self.storage,
            self.config,
            self.catalog,
            self.cluster_id,
            self.endpoint,
            self._apply_leadership,
            self._sync_catalog,
        )
        node.start()
        self.cluster = node
        self.router = Router(node, self.forwarder, self.config.forward_timeout_ms)
        self._apply_leadership(node.leadership())

    def _apply_leadership(self, led: Leadership) -> None:
        for log in self.open_logs():
            mine = led.get(log.topic, {})
            if mine and max(mine) >= log.info.partitions:  # grown by another broker: adopt first
                self._sync_catalog()
            log.set_leadership(mine)

    def _sync_catalog(self) -> None:
        """Adopt what other brokers changed in the catalog: close the logs of deleted (or deleted and
        re-created) topics, grow and re-configure the others."""
        self.catalog.refresh()
        for log in self.open_logs():
            try:
                info = self.catalog.get(log.topic)
            except TopicNotFound:
                info = None
            if info is None or info.topic_id != log.info.topic_id:
                with self._lock:
                    if self._logs.get(log.topic) is log:
                        del self._logs[log.topic]
                gone = TopicNotFound(f"topic {log.topic!r} was deleted", topic=log.topic)
                log.close(abandon=gone)
                logger.info("topic %s: deleted by another broker; its log is closed here", log.topic)
            elif info != log.info:
                log.ensure_partitions(info)

    def metadata(self) -> ClusterMetadata:
        """Brokers, controller and the leader of every partition, as this broker knows them.

        Outside a cluster this broker is the whole cluster and leads every partition (epoch 0).
        """
        if self.cluster is not None:
            return self.cluster.metadata()
        me = self.config.broker_id
        partitions = {
            t.name: tuple(PartitionState(t.name, p, me, 0, (me,), (me,)) for p in range(t.partitions))
            for t in self.list_topics()
        }
        return ClusterMetadata(self.cluster_id, me, (self.endpoint(),), partitions)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Leader, epoch, replicas and ISR of one partition (this broker alone outside a cluster)."""
        if self.cluster is not None:
            state = self.cluster.partition(topic, partition)
            if state is not None:
                return state
        me = self.config.broker_id
        return PartitionState(topic, partition, me, 0, (me,), (me,))

    # ------------------------------------------------------------------ admin

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str | int] | None = None
    ) -> TopicInfo:
        """Create a topic and its table; in a cluster, wait until the controller has given it leaders.

        In a cluster, a topic created without ``replication.factor`` gets ``default_replication_factor``
        capped at the live brokers; one asking for more replicas than live brokers is refused.
        """
        configs = dict(configs or {})
        if self.cluster is not None:
            live = len(self.cluster.metadata().brokers) or 1
            if "replication.factor" in configs:
                rf = int(configs["replication.factor"])
                if rf > live:
                    raise InvalidReplicationFactor(
                        f"replication factor {rf} is larger than the number of live brokers ({live})",
                        topic=name,
                        replication_factor=rf,
                        live_brokers=live,
                    )
            else:
                configs["replication.factor"] = min(self.config.default_replication_factor, live)
        info = self.catalog.create(name, partitions, configs)
        self.log(name)
        self._await_leaders(name, partitions)
        logger.info("created topic %s with %d partitions", name, partitions)
        return info

    def _await_leaders(self, name: str, partitions: int) -> None:
        node = self.cluster
        if node is not None:
            node.poke()
            if not node.wait_for(lambda: node.partition(name, partitions - 1) is not None, 10.0):
                logger.warning("topic %s: no leaders assigned within 10 s; the controller will", name)

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic's catalog state (raises TopicNotFound)."""
        return self.catalog.get(name)

    def list_topics(self) -> list[TopicInfo]:
        """All topics, by name."""
        return self.catalog.list()

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic: its catalog entry and then its table's data."""
        info = self.catalog.delete(name)
        with self._lock:
            log = self._logs.pop(name, None)
        if log is not None:
            log.close()
        self.storage.delete_tree(self.storage.topic_uri(name))
        logger.info("deleted topic %s", name)
        return info

    def alter_topic_configs(
        self, name: str, set: Mapping[str, str | int] | None = None, delete: Iterable[str] = ()
    ) -> TopicInfo:
        """Change topic configs (``delete`` resets to defaults)."""
        info = self.catalog.alter_configs(name, set, delete)
        self._adopt(info)
        return info

    def increase_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to ``partitions`` partitions (never shrink)."""
        info = self.catalog.increase_partitions(name, partitions)
        self._adopt(info)
        self._await_leaders(name, partitions)
        return info

    def _adopt(self, info: TopicInfo) -> None:
        with self._lock:
            log = self._logs.get(info.name)
        if log is not None:
            log.ensure_partitions(info)

    def open_logs(self) -> list[TopicLog]:
        """The topic logs opened so far (for metrics)."""
        with self._lock:
            return list(self._logs.values())

    def open_log(self, name: str) -> TopicLog | None:
        """The log of a topic if it is open already (never reads the table), else None."""
        with self._lock:
            return None if self._closed else self._logs.get(name)

    def log(self, name: str) -> TopicLog:
        """The open log of a topic, opened (and its state recovered from the table) on first use."""
        with self._lock:
            if self._closed:
                raise BrokerClosed("broker is closed")
            log = self._logs.get(name)
            if log is not None:
                return log
        try:
            info = self.catalog.get(name)
        except TopicNotFound:
            self.catalog.refresh()  # created by another broker since we last looked?
            info = self.catalog.get(name)
        with self._lock:
            log = self._logs.get(name)
            if log is None:
                log = TopicLog(self.storage, info, self.config, self.budget)
                self._logs[name] = log
                opened = True
            else:
                opened = False
        if opened and self.cluster is not None:
            log.set_leadership(self.cluster.leadership().get(name, {}))
        return log

    # ------------------------------------------------------------------ produce

    def init_producer(self) -> ProducerInfo:
        """A new idempotent producer id (random 62-bit), epoch 0, first sequence 0."""
        return ProducerInfo(producer_id=random.getrandbits(62), epoch=0, base_sequence=0)

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        partition: int | None = None,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
    ) -> list[RecordResult]:
        """Append records; one result per record, in order.

        A record goes to ``partition`` if given, else its own ``partition``, else Kafka's partition for its
        key, else round-robin. With ``acks="all"`` this returns after the Delta commit that holds the
        records; with ``"1"`` after offsets are assigned; with ``"0"`` at once, without offsets.

        Per-record problems (too large, unknown partition) are returned as that record's error; the others
        are still written. With ``producer`` (idempotent) the request is all or nothing.

        Raises:
            TopicNotFound, Throttled, OutOfOrderSequence, InvalidProducerEpoch, InvalidRecord: nothing
                was written.
        """
        if not records:
            self.log(topic)  # an unknown topic is still an error
            return []
        table = records_to_arrow(records)
        explicit = [r.partition for r in records]
        return self.produce_table(
            topic, table, explicit, partition=partition, acks=acks, producer=producer, timeout_ms=timeout_ms
        )

    def produce_table(
        self,
        topic: str,
        table: pa.Table,
        explicit: list[int | None] | None = None,
        *,
        partition: int | None = None,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
    ) -> list[RecordResult]:
        """:meth:`produce` for records already in columns (``key``, ``value``, ``headers``,
        ``timestamp_ms``, as :data:`~topiclake.platform.records.INPUT_SCHEMA`), with each record's explicit
        partition or None in ``explicit``. The HTTP routes build these columns straight from JSON."""
        ack = normalize_acks(acks)
        log = self.log(topic)
        info = log.info
        n_parts = info.partitions
        if partition is not None and not 0 <= partition < n_parts:
            raise PartitionNotFound(
                f"topic {topic} has no partition {partition} (it has {n_parts})",
                topic=topic,
                partition=partition,
            )
        n = table.num_rows
        if n == 0:
            return []
        explicit = explicit if explicit is not None else [None] * n
        limit = info.config.max_message_bytes
        results: list[RecordResult | None] = [None] * n
        failed = False
        for i in _suspects(table, explicit, limit, n_parts):  # vectorized screen, then exact per-record check
            error = self._check_row(topic, table, i, explicit[i], limit, n_parts)
            if error is not None:
                failed = True
                target = explicit[i] if explicit[i] is not None else partition
                results[i] = RecordResult(target, None, None, error)
        if self.schema_check is not None and info.config.validates_schemas:
            for i, error in enumerate(self.schema_check(topic, info.config, table)):
                if error is not None and results[i] is None:
                    failed = True
                    results[i] = RecordResult(
                        explicit[i] if explicit[i] is not None else partition, None, None, error
                    )
        if failed:
            if producer is not None:
                raise next(r.error for r in results if r is not None and r.error is not None)
            ok = [i for i, r in enumerate(results) if r is None]
            if not ok:
                return [r for r in results if r is not None]
            table = table.take(pa.array(ok, pa.int64()))
        else:
            ok = list(range(n))
        keys = table["key"].to_pylist() if partition is None else []
        targets = self._targets(keys, [explicit[i] for i in ok], partition, n_parts)
        if self.router is not None and not all(log.leads(p) for p in set(targets)):
            produced = self.router.produce(
                topic,
                table,
                targets,
                ack,
                producer,
                timeout_ms,
                lambda p, sub: self._append(topic, log, sub, [p] * sub.num_rows, ack, producer, timeout_ms),
            )
        else:
            produced = self._append(topic, log, table, targets, ack, producer, timeout_ms)
        for slot, res in zip(ok, produced, strict=True):
            results[slot] = res
        return results  # type: ignore[return-value]

    def _append(
        self,
        topic: str,
        log: TopicLog,
        table: pa.Table,
        targets: list[int],
        ack: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
    ) -> list[RecordResult]:
        """Append rows (input columns) to partitions this broker leads; one result per row, in order."""
        n = table.num_rows
        if producer is not None:
            seqs = pa.array(range(producer.base_sequence, producer.base_sequence + n), pa.int32())
            table = table.append_column("sequence", seqs)
        batches, rows = _group(table, targets)
        handle = log.append(batches, ack, producer)  # type: ignore[arg-type]
        if ack == "all":
            self._wait(handle, topic, timeout_ms)
        log_append = log.info.config.message_timestamp_type == "LogAppendTime"
        stamps = table["timestamp_ms"].to_pylist() if not log_append else [None] * n
        return results_of(handle, ack, targets, rows, stamps, producer)

    def _route(
        self, topic: str, partition: int, local: Callable[[], _T], remote: Callable[[BrokerEndpoint], _T]
    ) -> _T:
        """``local()`` here, or ``remote(leader)`` when another broker of the cluster leads the partition."""
        if self.router is None:
            return local()
        return self.router.on_leader(topic, partition, local, remote)

    def _remote(self) -> Forwarder:
        assert self.router is not None
        return self.router.forwarder

    def produce_arrow(
        self,
        topic: str,
        partition: int,
        table: pa.Table,
        *,
        acks: str | int = "all",
        producer: ProducerInfo | None = None,
        timeout_ms: int | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> tuple[int, int, int | None]:
        """Columnar append of a whole batch to one partition: (partition, count, base offset).

        ``table`` has some of the columns ``key``, ``value`` (binary), ``headers``, ``timestamp_ms`` (int64).
        No per-record Python work is done. The base offset is None for ``acks=0``. ``on_appended`` is called
        once the batch has its offsets, before the wait for the commit (the Kafka listener orders a
        connection's appends with it while their commits overlap).
        """
        ack = normalize_acks(acks)
        log = self.log(topic)
        data = _conform(table)
        limit = log.info.config.max_message_bytes
        for i in _suspects(data, [None] * data.num_rows, limit, log.info.partitions):
            error = self._check_row(topic, data, i, None, limit, log.info.partitions)
            if error is not None:  # one bad record fails the whole columnar batch
                raise error
        if self.schema_check is not None and log.info.config.validates_schemas:
            bad = next((e for e in self.schema_check(topic, log.info.config, data) if e is not None), None)
            if bad is not None:
                raise bad
        if data.num_rows == 0:
            log.high_watermark(partition)  # still reject an unknown partition
            return partition, 0, None
        if self.cluster is not None and not log.leads(partition):
            log.high_watermark(partition)  # an unknown partition is still an error of its own

            def forward(target: BrokerEndpoint) -> tuple[int, int, int | None]:
                res = self._remote().produce(target, topic, partition, data, ack, producer, timeout_ms)
                if res and res[0].error is not None:
                    raise res[0].error
                return partition, data.num_rows, res[0].offset if res else None

            return self._route(
                topic,
                partition,
                lambda: self._append_arrow(
                    topic, log, partition, data, ack, producer, timeout_ms, on_appended
                ),
                forward,
            )
        return self._append_arrow(topic, log, partition, data, ack, producer, timeout_ms, on_appended)

    def _append_arrow(
        self,
        topic: str,
        log: TopicLog,
        partition: int,
        data: pa.Table,
        ack: str,
        producer: ProducerInfo | None,
        timeout_ms: int | None,
        on_appended: Callable[[], None] | None = None,
    ) -> tuple[int, int, int | None]:
        if producer is not None:
            seqs = pa.array(range(producer.base_sequence, producer.base_sequence + data.num_rows), pa.int32())
            data = data.append_column("sequence", seqs)
        handle = log.append([(partition, data)], ack, producer)  # type: ignore[arg-type]
        if on_appended is not None:
            on_appended()
        if ack == "0":
            return partition, data.num_rows, None
        if ack == "all":
            self._wait(handle, topic, timeout_ms)
        if handle.by_sequence is not None:
            first = handle.by_sequence.get(producer.base_sequence) if producer else None
            return partition, data.num_rows, first[1] if first else None
        part, base, _count = handle.parts[0]
        return part, data.num_rows, base

    def _wait(self, handle: AppendHandle, topic: str, timeout_ms: int | None) -> None:
        timeout = (timeout_ms or self.config.request_timeout_ms) / 1000
        try:
            handle.wait(timeout)
        except FutureTimeout as exc:
            raise RequestTimedOut(
                f"commit to {topic} did not finish within {timeout:.1f} s; its outcome is unknown: retry "
                "with the same producer sequence to be safe",
                topic=topic,
            ) from exc

    def _check_row(
        self, topic: str, table: pa.Table, i: int, explicit: int | None, limit: int, n_parts: int
    ) -> TopiclakeError | None:
        if explicit is not None and not 0 <= explicit < n_parts:
            return PartitionNotFound(
                f"topic {topic} has no partition {explicit} (it has {n_parts})",
                topic=topic,
                partition=explicit,
            )
        row = table.slice(i, 1).to_pylist()[0]
        ts = row["timestamp_ms"]
        if ts is not None and ts < 0:
            return InvalidRecord(f"timestamp {ts} is negative", topic=topic)
        record = Record(row["key"], row["value"], [(h["key"], h["value"]) for h in row["headers"] or ()])
        size = record.size()
        if size > limit:
            return RecordTooLarge(
                f"record of {size} bytes is larger than max.message.bytes={limit} of topic {topic}",
                topic=topic,
                size=size,
            )
        return None

    def assign_partitions(
        self, keys: list[bytes | None], explicit: list[int | None], partition: int | None, n_parts: int
    ) -> list[int]:
        """Each record's partition: ``partition`` if given, else its explicit one, else Kafka's for its key,
        else round-robin."""
        return self._targets(keys, explicit, partition, n_parts)

    def _targets(
        self, keys: list[bytes | None], explicit: list[int | None], partition: int | None, n_parts: int
    ) -> list[int]:
        if partition is not None:
            return [partition] * len(explicit)
        targets = self.partitioner.assign(keys, n_parts)
        if any(p is not None for p in explicit):
            return [t if p is None else p for p, t in zip(explicit, targets, strict=True)]
        return targets

    # ------------------------------------------------------------------ read

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1024 * 1024,
        wait_ms: float = 0,
    ) -> FetchResult:
        """Committed records of one partition from ``offset`` on (see :meth:`TopicLog.fetch`)."""
        if max_records < 1 or max_bytes < 1:
            raise InvalidRecord("max_records and max_bytes must be at least 1")
        log = self.log(topic)
        if self.cluster is None or log.leads(partition):
            try:
                return log.fetch(partition, offset, max_records, max_bytes, wait_ms)
            except NotLeader:
                if self.cluster is None:
                    raise
        log.high_watermark(partition)  # an unknown partition is still an error of its own
        return self._route(
            topic,
            partition,
            lambda: log.fetch(partition, offset, max_records, max_bytes, wait_ms),
            lambda t: self._remote().fetch(t, topic, partition, offset, max_records, max_bytes, wait_ms),
        )

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int | None:
        """``earliest`` (log start), ``latest`` (end), or the first offset at or after a timestamp (ms).

        For a timestamp after the last record, returns None (Kafka answers -1).
        """
        log = self.log(topic)
        if self.cluster is not None and not log.leads(partition):
            log.high_watermark(partition)  # an unknown partition is still an error of its own
            return self._route(
                topic,
                partition,
                lambda: self.list_offsets(topic, partition, spec),
                lambda t: self._remote().list_offsets(t, topic, partition, spec),
            )
        if spec == "earliest":
            return log.log_start_offset(partition)
        if spec == "latest":
            return log.high_watermark(partition)
        if isinstance(spec, int) and not isinstance(spec, bool):
            if spec == -2:
                return log.log_start_offset(partition)
            if spec == -1:
                return log.high_watermark(partition)
            if spec < 0:
                raise InvalidRecord(f"timestamp {spec} is negative", topic=topic, partition=partition)
            return log.offset_for_timestamp(partition, spec)
        raise InvalidRecord(f"offset spec must be earliest, latest or a timestamp in ms, not {spec!r}")

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Commit what is pending, close every topic log, and leave the cluster."""
        if self._maintenance is not None:
            self._maintenance.close()
        self.groups.close()
        with self._lock:
            self._closed = True
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.router is not None:
            self.router.close()
        logger.info("broker %d closed", self.config.broker_id)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _conform(table: pa.Table) -> pa.Table:
    n = table.num_rows
    cols = []
    for field in INPUT_SCHEMA:
        if field.name in table.column_names:
            cols.append(table[field.name].cast(field.type))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(cols, schema=INPUT_SCHEMA)


def _group(table: pa.Table, targets: list[int]) -> tuple[list[tuple[int, pa.Table]], list[list[int]]]:
    """Split rows by target partition, keeping their order: the batches and each batch's row numbers."""
    first = targets[0]
    if all(t == first for t in targets):
        return [(first, table)], [list(range(len(targets)))]
    order: dict[int, list[int]] = {}
    for row, p in enumerate(targets):
        order.setdefault(p, []).append(row)
    return [(p, table.take(pa.array(rows, pa.int64()))) for p, rows in order.items()], list(order.values())


def _suspects(table: pa.Table, explicit: list[int | None], limit: int, n_parts: int) -> list[int]:
    """Rows that may break a rule (size, timestamp, partition), found with columnar work only."""
    size = pc.add(
        pc.fill_null(pc.binary_length(table["key"]), 0), pc.fill_null(pc.binary_length(table["value"]), 0)
    )
    headers = table["headers"].combine_chunks()
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            lengths = pc.add(
                pc.binary_length(pc.struct_field(flat, "key")),
                pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0),
            )
            parents = pc.list_parent_indices(headers)
            sums = pa.table({"row": parents, "n": lengths}).group_by("row").aggregate([("n", "sum")])
            extra = [0] * len(headers)
            for row, n in zip(sums["row"].to_pylist(), sums["n_sum"].to_pylist(), strict=True):
                extra[row] = n
            size = pc.add(size, pa.array(extra, pa.int64()))
    bad = pc.or_(pc.greater(size, limit), pc.fill_null(pc.less(table["timestamp_ms"], 0), False))
    rows = set(pc.indices_nonzero(bad).to_pylist())
    rows.update(i for i, p in enumerate(explicit) if p is not None and not 0 <= p < n_parts)
    return sorted(rows)
