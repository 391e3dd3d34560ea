"""Appends to a topic from outside the gateway, exactly once: Spark's sink and the reprocessing job.

A writer that is not the partitions' leader (a Spark driver committing a micro-batch) follows the leader's
rules, so the two can write one topic at the same time:

- partitions by Kafka's key partitioner (an explicit partition wins; keyless records are spread evenly);
- offsets continue from each partition's high watermark, the ``txn`` version ``topiclake/hwm/<topic>/<p>``,
  and the commit carries the new high watermarks. If the gateway (or anyone) committed meanwhile, Delta's
  check on the ``txn`` app ids rejects our commit; we re-read the watermarks and commit again with new
  offsets. The gateway, fenced in turn, moves its own uncommitted records behind ours
  (:meth:`.topic_log.TopicLog._rebase_if_fenced`).
- the same commit carries a ``txn`` action ``topiclake/writer/<topic>/<writer id>`` whose version is the
  write's sequence number (a micro-batch id + 1, or 1 for a one-off job). A write whose sequence the table
  already holds is skipped: a replayed micro-batch or a re-run job writes nothing twice. Whether an attempt
  whose commit raised landed anyway is told by the commit's id in the Delta history.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError

from topiclake.errors import CommitConflict, InvalidRecord, PartitionNotFound
from topiclake.platform.catalog import TopicCatalog, TopicInfo
from topiclake.platform.log.file_index import FileIndex, build_index
from topiclake.platform.log.topic_log import commit_landed, partition_app_id
from topiclake.platform.partitioner import Partitioner
from topiclake.platform.records import INPUT_SCHEMA, now_ms, topic_rows
from topiclake.platform.storage import Storage
from topiclake.platform.storage.leases import LogLease
from topiclake.schemas import TOPIC_SCHEMA

logger = logging.getLogger(__name__)

__all__ = ["TopicWriter", "WriteResult", "writer_app_id"]

_FOREIGN = (DeltaError, OSError, pa.ArrowException)
_MAX_ATTEMPTS = 50
#: Fenced attempts after which the writer announces its intent to the gateway (see leases.py).
_INTENT_AFTER = 3
#: Time for gateways to see an intent (they look every 100 ms) and finish the commit in flight.
_INTENT_SETTLE_S = 0.25


def writer_app_id(topic: str, writer_id: str) -> str:
    """The Delta ``txn`` app id recording how far the writer ``writer_id`` got in ``topic``."""
    return f"topiclake/writer/{topic}/{writer_id}"


@dataclass
class WriteResult:
    """What one write did.

    Attributes:
        topic: The topic written.
        skipped: The table already held this writer's sequence: nothing was written.
        ranges: Per partition, (first offset, record count) of the records written.
        version: The Delta version of the commit (or of the table when skipped).
        attempts: Commit attempts it took (more than one after a fence or a concurrent rewrite).
    """

    topic: str
    skipped: bool = False
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    version: int = -1
    attempts: int = 0

    @property
    def records(self) -> int:
        """Records written."""
        return sum(count for _, count in self.ranges.values())


class TopicWriter:
    """Exactly-once appends of whole Arrow tables to one topic, beside the gateway.

    Args:
        storage: The warehouse.
        topic: The topic to write (it must exist in the catalog).
        partitioner: Partitioner for keyless and keyed records (a fresh one by default).
    """

    def __init__(self, storage: Storage, topic: str, partitioner: Partitioner | None = None) -> None:
        self._storage = storage
        storage.verify_commit_safety()
        self.topic = topic
        self.info: TopicInfo = TopicCatalog(storage).get(topic)
        self.uri = storage.topic_uri(topic)
        self._fs = storage.filesystem(self.uri)
        self._partitioner = partitioner or Partitioner()

    def assign_partitions(self, records: pa.Table) -> pa.Int32Array:
        """Each record's partition: its ``partition`` column where set, else by key (Kafka's partitioner).

        Raises:
            PartitionNotFound: An explicit partition the topic does not have.
        """
        n_parts = self.info.partitions
        keys = records["key"] if "key" in records.column_names else pa.nulls(records.num_rows, pa.binary())
        by_key = self._partitioner.assign_arrow(keys.combine_chunks(), n_parts)
        if "partition" not in records.column_names:
            return by_key
        explicit = records["partition"].combine_chunks().cast(pa.int32())
        bad = pc.or_(pc.less(explicit, 0), pc.greater_equal(explicit, n_parts))
        if pc.any(pc.fill_null(bad, False)).as_py():
            wrong = pc.filter(explicit, pc.fill_null(bad, False))[0].as_py()
            raise PartitionNotFound(
                f"topic {self.topic} has no partition {wrong} (it has {n_parts})",
                topic=self.topic,
                partition=wrong,
            )
        return pc.if_else(explicit.is_null(), by_key, explicit)

    def write(self, records: pa.Table, writer_id: str | None = None, sequence: int = 1) -> WriteResult:
        """Append ``records`` in one Delta commit, once per (``writer_id``, ``sequence``).

        Args:
            records: Columns ``key``/``value`` (binary), optional ``headers``, ``timestamp_ms`` (int64 epoch
                ms) and ``partition`` (int; null picks by key).
            writer_id: Identity of the writer for exactly-once; None appends unconditionally.
            sequence: The write's number for this writer (>= 1, increasing): a write whose sequence is at
                or below the one the table holds is skipped.

        Raises:
            InvalidRecord: Columns of the wrong type.
            PartitionNotFound: An explicit partition the topic does not have.
            CommitConflict: The commit kept failing.
            StorageError: The table cannot be read or written.
        """
        if sequence < 1:
            raise InvalidRecord(f"a write's sequence must be >= 1, not {sequence}")
        inputs = _inputs(records)
        parts = self.assign_partitions(records) if records.num_rows else pa.array([], pa.int32())
        by_partition = {
            int(p): inputs.filter(pc.equal(parts, p)) for p in pc.unique(parts).to_pylist() if p is not None
        }
        app_id = writer_app_id(self.topic, writer_id) if writer_id is not None else None
        result = WriteResult(self.topic)
        if not by_partition and app_id is None:
            return result
        commit_id = uuid.uuid4().hex
        base_version = -1
        pending: dict[int, tuple[int, int]] = {}
        dt: DeltaTable | None = None
        index: FileIndex | None = None
        intent: LogLease | None = None
        fenced = 0
        try:
            while True:
                result.attempts += 1
                try:
                    # attempts are kept short (refresh, not reopen; the file index once): a busy gateway
                    # commits every few ms, and each of its commits landing inside our attempt fences it
                    if dt is None:
                        dt = DeltaTable(self.uri, storage_options=self._storage.options())
                    else:
                        dt.update_incremental()
                    if index is None:
                        index = build_index(dt, self._fs)
                    if base_version >= 0 and commit_landed(dt, commit_id, base_version):
                        result.ranges = pending
                        result.version = dt.version()
                        return result
                    if app_id is not None and (dt.transaction_version(app_id) or 0) >= sequence:
                        result.skipped = True
                        result.version = dt.version()
                        logger.info(
                            "topic %s: writer %s sequence %d already written; skipping",
                            self.topic,
                            writer_id,
                            sequence,
                        )
                        return result
                    base_version = dt.version()
                    data, txns, pending = self._rows(dt, index, by_partition)
                    if app_id is not None:
                        txns.append(Transaction(app_id, sequence, now_ms()))
                    meta = {"topiclake.commit": commit_id, "topiclake.writer": f"{writer_id}"}
                    props = CommitProperties(app_transactions=txns, custom_metadata=meta)
                    write_deltalake(dt, data, mode="append", commit_properties=props)
                    self._storage.sync_commit(self.uri, dt.version())
                    result.ranges = pending
                    result.version = dt.version()
                    logger.info(
                        "topic %s: writer %s wrote %d records at version %d: %s",
                        self.topic,
                        writer_id,
                        result.records,
                        result.version,
                        {p: f"{lo}-{lo + n - 1}" for p, (lo, n) in sorted(pending.items())},
                    )
                    return result
                except _FOREIGN as exc:
                    reason = str(exc).splitlines()[0]
                    if result.attempts >= _MAX_ATTEMPTS:
                        raise CommitConflict(
                            f"write to topic {self.topic} failed {result.attempts} times: {reason}",
                            topic=self.topic,
                        ) from exc
                    logger.info(
                        "topic %s: write attempt %d lost a race (%s)", self.topic, result.attempts, reason
                    )
                    # a listing of _delta_log that raced a commit (readdir may skip an entry created while
                    # it runs and return a later one: delta-rs then sees a gap) is a lost race too, and so
                    # is its cure: announce our intent and the gateway holds its commits
                    gap = "found gap" in reason
                    if "concurrent" not in reason.lower() and not gap:
                        dt = None  # an I/O error: reopen
                        time.sleep(min(0.01 * 2**result.attempts, 1.0))
                        continue
                    if gap:
                        dt = None
                    fenced += 1
                    if fenced == _INTENT_AFTER and intent is None:
                        # a busy gateway keeps winning: announce our intent; it holds its commits for us
                        holder = f"writer {writer_id or commit_id}"
                        intent = LogLease(self._storage, self.topic, holder, ttl_s=10.0, kind="write")
                        intent.acquire()
                        time.sleep(_INTENT_SETTLE_S)
        finally:
            if intent is not None:
                intent.release()

    def _rows(
        self, dt: DeltaTable, index: FileIndex, by_partition: dict[int, pa.Table]
    ) -> tuple[pa.Table, list[Transaction], dict[int, tuple[int, int]]]:
        now = now_ms()
        cfg = self.info.config
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        tables: list[pa.Table] = []
        txns: list[Transaction] = []
        ranges: dict[int, tuple[int, int]] = {}
        for p, batch in sorted(by_partition.items()):
            hwm = dt.transaction_version(partition_app_id(self.topic, p))
            end = index.end_offset(p)
            base = max(hwm or 0, end or 0)
            seg = index.segment_stats(p)
            segment = base
            if seg is not None:
                seg_base, seg_bytes, seg_first_ms = seg
                if seg_bytes < cfg.segment_bytes and now - seg_first_ms < cfg.segment_ms:
                    segment = seg_base  # keep filling the live segment, as the leader does
            tables.append(topic_rows(batch, self.topic, p, base, segment, now, log_append))
            txns.append(Transaction(partition_app_id(self.topic, p), base + batch.num_rows, now))
            ranges[p] = (base, batch.num_rows)
        data = pa.concat_tables(tables) if tables else TOPIC_SCHEMA.empty_table()
        return data, txns, ranges


def _inputs(records: pa.Table) -> pa.Table:
    """The input columns (:data:`~topiclake.platform.records.INPUT_SCHEMA`) of ``records``."""
    n = records.num_rows
    columns = []
    try:
        for field_ in INPUT_SCHEMA:
            if field_.name in records.column_names:
                columns.append(records[field_.name].combine_chunks().cast(field_.type))
            else:
                columns.append(pa.nulls(n, field_.type))
        return pa.Table.from_arrays(columns, schema=INPUT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecord(f"records for topic cannot be converted: {exc}") from exc
