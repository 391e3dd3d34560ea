"""The administrators' transaction APIs, as ``kafka-transactions.sh`` uses them: DescribeProducers and
WriteTxnMarkers (its ``describe-producers``, ``find-hanging`` and ``abort``).

In topiclake's model (docs/transactions.md) a partition's log never holds an open transaction's records:
they are held by the coordinator until the commit. So no transaction ever *starts at an offset*: every
producer is described with ``current_txn_start_offset`` -1, ``find-hanging`` finds nothing (nothing can
hang in a log), and ``abort --start-offset`` finds no transaction. WriteTxnMarkers writes no marker (there
is no control record in a log): an abort marker aborts the named producer's open transaction if this
broker coordinates it (the whole transaction, fencing its producer), and is otherwise a no-op success; a
commit marker (only Kafka's own coordinators send them) is refused with INVALID_TXN_STATE.
"""

from __future__ import annotations

from typing import Any

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.kafka.handlers.transactions import coordinator
from topiclake.platform.transactions import TxnState

TopicPartition = tuple[str, int]


def _producer(pid: int, epoch: int, last_sequence: int) -> dict[str, Any]:
    return {
        "producer_id": pid,
        "producer_epoch": epoch,
        "last_sequence": last_sequence,
        "last_timestamp": -1,
        "coordinator_epoch": -1,
        "current_txn_start_offset": -1,
    }


def _describe_sync(ctx: Context, wanted: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
    holding: dict[TopicPartition, list[tuple[int, int]]] = {}
    for t in coordinator(ctx).describe():
        if t.state is TxnState.ONGOING:
            for tp in t.partitions:
                holding.setdefault(tp, []).append((t.producer_id, t.epoch))
    out = []
    for topic, partitions in wanted:
        rows = []
        for p in partitions:
            row: dict[str, Any] = {"partition_index": p, "error_code": 0, "error_message": None}
            try:
                log = ctx.broker.log(topic)
                if not log.leads(p):
                    row["error_code"] = kerr.NOT_LEADER_OR_FOLLOWER
                    row["active_producers"] = []
                    rows.append(row)
                    continue
                seen = [_producer(*state) for state in log.producers(p)]
            except TopiclakeError as exc:
                row.update(error_code=kerr.code_for(exc), error_message=str(exc), active_producers=[])
                rows.append(row)
                continue
            # transactional producers whose open transaction holds records for this partition
            seen += [_producer(pid, epoch, -1) for pid, epoch in holding.get((topic, p), [])]
            row["active_producers"] = seen
            rows.append(row)
        out.append({"name": topic, "partitions": rows})
    return out


async def describe_producers(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeProducers: the idempotent producers this broker has seen per partition it leads, and the
    producers of open transactions holding records for it (none with a transaction start offset)."""
    wanted = [(str(t.name), [int(i) for i in t.partition_indexes]) for t in req.body.topics]
    return {"topics": await ctx.run(_describe_sync, ctx, wanted)}


def _markers_sync(ctx: Context, markers: Any) -> list[dict[str, Any]]:
    out = []
    for m in markers:
        pairs = [(str(t.name), int(p)) for t in m.topics for p in t.partition_indexes]
        code = 0
        if bool(m.transaction_result):
            code = kerr.INVALID_TXN_STATE  # a commit is decided by the coordinator only
        else:
            coordinator(ctx).abort_marker(int(m.producer_id), int(m.producer_epoch), pairs)
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                part_code = code
                try:
                    ctx.broker.log(str(t.name)).high_watermark(int(p))
                except TopiclakeError as exc:
                    part_code = kerr.code_for(exc)
                parts.append({"partition_index": int(p), "error_code": part_code})
            topics.append({"name": t.name, "partitions": parts})
        out.append({"producer_id": m.producer_id, "topics": topics})
    return out


async def write_txn_markers(ctx: Context, req: Request) -> dict[str, Any]:
    """WriteTxnMarkers: abort markers abort the producer's open transaction held here (see the module)."""
    return {"markers": await ctx.run(_markers_sync, ctx, req.body.markers)}
