"""Kafka transactions: InitProducerId with a transactional id, AddPartitionsToTxn v0-3, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, Produce of transactional batches; ListTransactions and DescribeTransactions. The
version of a request says which protocol it follows: Produce v12, TxnOffsetCommit v5 and EndTxn v5 are
transaction version 2 (KIP-890 part 2: partitions and groups join with their first batch or offsets, every
EndTxn bumps the epoch and answers it), older ones the classic protocol; a broker advertises v12/v5 only
with its ``transaction_version`` at 2.

The state machine is :class:`~topiclake.platform.transactions.TransactionCoordinator`; this module maps
requests onto it and its errors onto Kafka's codes (ACLs: :mod:`topiclake.kafka.authz_txn`). A transactional
id's coordinator is one broker (the rendezvous hash, as for groups); the others answer NOT_COORDINATOR to its
requests and forward its Produce batches there (:mod:`topiclake.kafka.txn_forward`). With auth on in a
cluster a transactional InitProducerId is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a forwarded
Produce would have to authenticate to the coordinator).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from topiclake.errors import ProducerFenced, TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka import records
from topiclake.kafka.classic_groups import GroupError
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.context import Context
from topiclake.kafka.handlers.cluster import brokers
from topiclake.kafka.txn_forward import (
    FORWARDED_BY,
    ForwardFailed,
    forward_produce,
    forward_txn_offset_commit,
)
from topiclake.platform.cluster.assignment import coordinator_for
from topiclake.platform.transactions import TransactionCoordinator, TxnState

logger = logging.getLogger(__name__)

#: The first version of each API that answers PRODUCER_FENCED (KIP-588); older ones get
#: INVALID_PRODUCER_EPOCH for the same condition.
_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
#: The first versions of transaction version 2 (KIP-890 part 2).
TV2_PRODUCE = 12
TV2_END_TXN = 5
TV2_TXN_OFFSET_COMMIT = 5
_OPERATION_NOT_ATTEMPTED = 55


def coordinator(ctx: Context) -> TransactionCoordinator:
    """The listener's transaction coordinator (made by the server)."""
    found: TransactionCoordinator = ctx.state["transactions"]
    return found


def _code(exc: TopiclakeError, req: Request) -> int:
    if isinstance(exc, ProducerFenced) and req.version < _FENCED_FROM.get(req.api_key, 0):
        return kerr.INVALID_PRODUCER_EPOCH
    return kerr.code_for(exc)


def coordinator_node(ctx: Context, transactional_id: str) -> dict[str, Any]:
    """The broker that coordinates ``transactional_id``: the platform's rendezvous hash over live Kafka
    brokers, as for groups (a dead broker's ids move, the others stay)."""
    listed, _controller, _cluster = brokers(ctx)
    me = ctx.broker.config.broker_id
    live = tuple(sorted(b["node_id"] for b in listed))
    if ctx.state.get("transaction_brokers") != live:
        # ids may have moved to this broker: it reads them from _system/transactions on their next request
        ctx.state["transaction_brokers"] = live
        coordinator(ctx).brokers_changed()
    best = coordinator_for(f"transaction/{transactional_id}", list(live))
    found = next((b for b in listed if b["node_id"] == best), None)
    if found is None:
        return {"node_id": me, "host": ctx.host, "port": ctx.port}
    return {"node_id": found["node_id"], "host": found["host"], "port": found["port"]}


def owner_check(ctx: Context) -> Callable[[str], bool]:
    """Whether this broker coordinates a transactional id, by the live brokers as of this call (one look
    for the whole timeout sweep, which leaves other brokers' ids alone)."""
    listed, _controller, _cluster = brokers(ctx)
    live = sorted(b["node_id"] for b in listed)
    me = ctx.broker.config.broker_id
    return lambda tid: not live or coordinator_for(f"transaction/{tid}", live) == me


def _owned(ctx: Context, transactional_id: str) -> bool:
    return bool(coordinator_node(ctx, transactional_id)["node_id"] == ctx.broker.config.broker_id)


def _served(ctx: Context) -> bool:
    """Whether this listener serves transactions: always, except with auth on in a cluster (a forwarded
    transactional Produce would have to authenticate to the coordinator; see the module doc)."""
    if not ctx.security.auth:
        return True
    listed, _controller, _cluster = brokers(ctx)
    return len(listed) <= 1


async def init_transactional(ctx: Context, req: Request) -> dict[str, Any]:
    """InitProducerId with a transactional id: fence older instances, abort their open transaction."""
    b = req.body
    refused = {
        "error_code": kerr.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    if not await ctx.run(_served, ctx):
        return refused
    if not await ctx.run(_owned, ctx, str(b.transactional_id)):
        return {"error_code": kerr.NOT_COORDINATOR, "producer_id": -1, "producer_epoch": -1}
    try:
        info = await ctx.run(
            coordinator(ctx).init_producer_id,
            str(b.transactional_id),
            ms(b.transaction_timeout),
            int(getattr(b, "producer_id", -1)),
            int(getattr(b, "producer_epoch", -1)),
        )
    except TopiclakeError as exc:
        return {"error_code": _code(exc, req), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": info.producer_id, "producer_epoch": info.epoch}


def _add_partitions_sync(ctx: Context, b: Any, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    bad: dict[tuple[str, int], int] = {}
    for topic, partition in wanted:
        try:
            ctx.broker.log(topic).high_watermark(partition)
        except TopiclakeError as exc:
            bad[(topic, partition)] = kerr.code_for(exc)
    if bad:
        return {tp: bad.get(tp, _OPERATION_NOT_ATTEMPTED) for tp in wanted}
    if not _owned(ctx, str(b.v3_and_below_transactional_id)):
        return dict.fromkeys(wanted, kerr.NOT_COORDINATOR)
    coordinator(ctx).add_partitions(
        str(b.v3_and_below_transactional_id),
        int(b.v3_and_below_producer_id),
        int(b.v3_and_below_producer_epoch),
        wanted,
    )
    return dict.fromkeys(wanted, 0)


async def add_partitions_to_txn(ctx: Context, req: Request) -> dict[str, Any]:
    """AddPartitionsToTxn v0-3 (a client's; the broker-to-broker v4+ is not offered)."""
    b = req.body
    wanted = [(str(t.name), int(p)) for t in b.v3_and_below_topics for p in t.partitions]
    try:
        codes = await ctx.run(_add_partitions_sync, ctx, b, wanted)
    except TopiclakeError as exc:
        codes = dict.fromkeys(wanted, _code(exc, req))
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": codes[(str(t.name), int(p))]}
                    for p in t.partitions
                ],
            }
            for t in b.v3_and_below_topics
        ]
    }


async def add_offsets_to_txn(ctx: Context, req: Request) -> dict[str, Any]:
    """AddOffsetsToTxn: the transaction will commit offsets of the group."""
    b = req.body
    if not await ctx.run(_owned, ctx, str(b.transactional_id)):
        return {"error_code": kerr.NOT_COORDINATOR}
    try:
        await ctx.run(
            coordinator(ctx).add_offsets,
            str(b.transactional_id),
            int(b.producer_id),
            int(b.producer_epoch),
            str(b.group_id),
        )
    except TopiclakeError as exc:
        return {"error_code": _code(exc, req)}
    return {"error_code": 0}


def _txn_offset_commit_sync(ctx: Context, req: Request) -> int:
    b = req.body
    group_id = str(b.group_id)
    member_id = str(getattr(b, "member_id", "") or "")
    generation = int(getattr(b, "generation_id", -1))
    if member_id and req.client_id != FORWARDED_BY:
        # v3+ with group metadata: fenced by the group's generation like OffsetCommit, at the group's
        # coordinator (this broker: the client sent it here), before it goes on to the transaction's
        try:
            ctx.state["classic_groups"].check_commit(group_id, member_id, generation)
        except GroupError as exc:
            return exc.code
    if not _owned(ctx, str(b.transactional_id)):
        return kerr.NOT_COORDINATOR
    offsets = {
        (str(t.name), int(p.partition_index)): (int(p.committed_offset), p.committed_metadata)
        for t in b.topics
        for p in t.partitions
    }
    coordinator(ctx).stage_offsets(
        str(b.transactional_id),
        int(b.producer_id),
        int(b.producer_epoch),
        group_id,
        offsets,
        implicit=req.version >= TV2_TXN_OFFSET_COMMIT,
    )
    return 0


async def txn_offset_commit(ctx: Context, req: Request) -> dict[str, Any]:
    """TxnOffsetCommit: offsets that the group gets when (and only if) the transaction commits. A client
    sends it to the group's coordinator; the transaction's holds the offsets, so a group coordinator that
    is not the transaction's forwards it there (after checking the group's generation)."""
    b = req.body
    tid = str(b.transactional_id)
    codes: dict[tuple[str, int], int] = {}
    try:
        code = await ctx.run(_txn_offset_commit_sync, ctx, req)
        node = await ctx.run(coordinator_node, ctx, tid)
        if code == kerr.NOT_COORDINATOR and req.client_id != FORWARDED_BY:
            body = _forwarded_offsets(b)
            codes = await forward_txn_offset_commit(node["host"], int(node["port"]), body, req.version)
    except TopiclakeError as exc:
        code = _code(exc, req)
    except ForwardFailed as exc:
        logger.info("kafka: TxnOffsetCommit of %s not forwarded: %s", tid, exc)
        code = kerr.COORDINATOR_NOT_AVAILABLE
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": codes.get((str(t.name), int(p.partition_index)), code),
                    }
                    for p in t.partitions
                ],
            }
            for t in b.topics
        ]
    }


def _forwarded_offsets(b: Any) -> dict[str, Any]:
    """A TxnOffsetCommit v3 body of the request (its group's generation already checked here)."""
    return {
        "transactional_id": b.transactional_id,
        "group_id": b.group_id,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": getattr(p, "committed_leader_epoch", -1),
                        "committed_metadata": p.committed_metadata,
                    }
                    for p in t.partitions
                ],
            }
            for t in b.topics
        ],
    }


async def end_txn(ctx: Context, req: Request) -> dict[str, Any]:
    """EndTxn: commit (decided in ``_system/transactions``, then rolled forward) or abort."""
    b = req.body
    none = {"producer_id": -1, "producer_epoch": -1}
    if not await ctx.run(_owned, ctx, str(b.transactional_id)):
        return {"error_code": kerr.NOT_COORDINATOR, **none}
    try:
        pid, epoch = await ctx.run(
            functools.partial(
                coordinator(ctx).end_txn,
                str(b.transactional_id),
                int(b.producer_id),
                int(b.producer_epoch),
                bool(b.committed),
                bump=req.version >= TV2_END_TXN,
            )
        )
    except TopiclakeError as exc:
        logger.info("kafka: EndTxn of %s failed: %s", b.transactional_id, exc)
        return {"error_code": _code(exc, req), **none}
    # v5 answers the producer id and epoch to go on with (older versions have no such fields)
    return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}


def _stage_partition(
    ctx: Context, tid: str, topic: str, partition: int, data: bytes | None, implicit: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_append_time": -1}
    try:
        batches = records.decode(bytes(data or b""))
    except (records.UnsupportedMagic, records.CorruptBatch) as exc:
        return {**out, "error_code": kerr.CORRUPT_MESSAGE, "error_message": str(exc)}
    try:
        for batch in batches:
            if not batch.transactional:
                return {
                    **out,
                    "error_code": kerr.INVALID_RECORD,
                    "error_message": "batch is not transactional",
                }
            coordinator(ctx).stage(
                tid,
                batch.producer_id,
                batch.producer_epoch,
                topic,
                partition,
                batch.base_sequence,
                batch.table,
                implicit=implicit,
            )
    except ProducerFenced as exc:
        return {**out, "error_code": kerr.INVALID_PRODUCER_EPOCH, "error_message": str(exc)}
    except TopiclakeError as exc:
        return {**out, "error_code": kerr.code_for(exc), "error_message": str(exc)}
    # offsets are given at commit (docs/transactions.md): the answer has none yet
    return {**out, "error_code": 0}


def _stage_here(
    ctx: Context, tid: str, body: Any, implicit: bool
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The id's coordinator, and the batches' answers when it is this broker (one trip to the listener's
    threads per Produce, not two: the hop costs milliseconds on a busy machine)."""
    node = coordinator_node(ctx, tid)
    if node["node_id"] != ctx.broker.config.broker_id:
        return node, None
    return node, _stage_all(ctx, tid, body, implicit)


def _stage_all(ctx: Context, tid: str, body: Any, implicit: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partition_responses": [
                _stage_partition(ctx, tid, str(t.name), int(p.index), p.records, implicit)
                for p in t.partition_data
            ],
        }
        for t in body.topic_data
    ]


async def produce_transactional(ctx: Context, req: Request) -> dict[str, Any] | None:
    """Produce with a transactional id: each batch is held by the coordinator until the transaction ends."""
    body = req.body
    tid = str(body.transactional_id)
    implicit = req.version >= TV2_PRODUCE  # transaction version 2: the batch adds its partition
    node, staged = await ctx.run(_stage_here, ctx, tid, body, implicit)
    if staged is not None:
        responses = staged
    elif req.client_id == FORWARDED_BY:  # the brokers disagree on the coordinator for a moment: retry
        responses = _failed(body, kerr.NOT_LEADER_OR_FOLLOWER)
    else:
        forwarded = {
            "transactional_id": tid,
            "acks": -1,
            "timeout": ms(body.timeout),
            "topic_data": [
                {
                    "name": t.name,
                    "partition_data": [{"index": p.index, "records": p.records} for p in t.partition_data],
                }
                for t in body.topic_data
            ],
        }
        try:
            responses = await forward_produce(node["host"], int(node["port"]), forwarded, implicit)
        except ForwardFailed as exc:
            logger.info("kafka: transactional produce of %s not forwarded: %s", tid, exc)
            responses = _failed(body, kerr.NOT_LEADER_OR_FOLLOWER)
    return None if int(body.acks) == 0 else {"responses": responses}


def _failed(body: Any, code: int) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partition_responses": [
                {"index": p.index, "error_code": code, "base_offset": -1, "log_append_time": -1}
                for p in t.partition_data
            ],
        }
        for t in body.topic_data
    ]


async def list_transactions(ctx: Context, req: Request) -> dict[str, Any]:
    """ListTransactions: this broker's transactional ids, filtered by state, producer id and (v1) age."""
    b = req.body
    states = {str(s) for s in getattr(b, "state_filters", ())}
    pids = {int(p) for p in getattr(b, "producer_id_filters", ())}
    older = int(getattr(b, "duration_filter", -1))
    valid = {s.value for s in TxnState}
    now = int(time.time() * 1000)
    known = await ctx.run(coordinator(ctx).describe)
    mine = await ctx.run(lambda: {t.transactional_id for t in known if _owned(ctx, t.transactional_id)})
    listed = [
        {
            "transactional_id": t.transactional_id,
            "producer_id": t.producer_id,
            "transaction_state": t.state.value,
        }
        for t in known
        if t.transactional_id in mine
        and (not states or t.state.value in states)
        and (not pids or t.producer_id in pids)
        and (older < 0 or (t.started_ms >= 0 and now - t.started_ms >= older))
    ]
    return {"error_code": 0, "unknown_state_filters": sorted(states - valid), "transaction_states": listed}


async def describe_transactions(ctx: Context, req: Request) -> dict[str, Any]:
    """DescribeTransactions: state, producer, timeout, start and partitions of each transactional id."""
    found = {t.transactional_id: t for t in await ctx.run(coordinator(ctx).describe)}
    out = []
    for tid in req.body.transactional_ids:
        t = found.get(str(tid))
        if t is None:
            out.append(
                {
                    "error_code": kerr.TRANSACTIONAL_ID_NOT_FOUND,
                    "transactional_id": tid,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": 0,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in t.partitions:
            topics.setdefault(topic, []).append(partition)
        out.append(
            {
                "error_code": 0,
                "transactional_id": tid,
                "transaction_state": t.state.value,
                "transaction_timeout": t.timeout_ms,
                "transaction_start_time": max(t.started_ms, 0),
                "producer_id": t.producer_id,
                "producer_epoch": t.epoch,
                "topics": [{"topic": k, "partitions": v} for k, v in sorted(topics.items())],
            }
        )
    return {"transaction_states": out}
