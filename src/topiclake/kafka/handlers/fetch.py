"""Fetch (long-poll with max_wait_ms/min_bytes, records re-encoded as RecordBatch v2) and ListOffsets.

A fetch with nothing to read (every partition at its end: a consumer at the tail, Kafka's EndToEndLatency
polling with ``fetch.max.wait.ms=0``) is answered on the event loop from the logs' in-memory high
watermarks, without a thread; a waiting fetch of several partitions looks again every few milliseconds
the same way and takes a thread only once there is something to read.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow.compute as pc

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.batch_encoder import encode_up_to
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.context import Context

_POLL_S = 0.005
_MAX_RECORDS = 100_000
#: How long a partition's log start offset, as a fetch last answered it, may be repeated by a caught-up one.
_LOG_START_TTL_S = 1.0
_LOG_STARTS = "fetch_log_starts"  # key in Context.state: (topic, partition) -> (log start, when)
# The log bounds a read by Arrow bytes; a fetch asks it for partition_max_bytes divided by the ratio of
# encoded to Arrow bytes the partition's last fetch found, and the encoder cuts at the exact size.
_RATIOS = "fetch_encoded_ratio"  # key in Context.state: (topic, partition) -> encoded bytes per Arrow byte
_MIN_RATIO = 0.25


def _fetch_once(ctx: Context, body: Any, wait_ms: float) -> tuple[list[dict[str, Any]], int]:
    total = 0
    budget = max(int(getattr(body, "max_bytes", 0x7FFFFFFF)), 1)
    epoch = 0
    topics = []
    starts: dict[tuple[str, int], tuple[int, float]] = ctx.state.setdefault(_LOG_STARTS, {})
    ratios: dict[tuple[str, int], float] = ctx.state.setdefault(_RATIOS, {})
    for t in body.topics:
        parts = []
        for p in t.partitions:
            out: dict[str, Any] = {
                "partition_index": p.partition,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [],
                "preferred_read_replica": -1,
                "records": b"",
            }
            key = (str(t.topic), int(p.partition))
            try:
                limit = max(min(int(p.partition_max_bytes), budget), 1)
                ratio = ratios.get(key, 1.0)
                res = ctx.broker.fetch(
                    key[0], key[1], int(p.fetch_offset), _MAX_RECORDS, max(int(limit / ratio), 1), wait_ms
                )
                data = b""
                if budget > 0 and res.records.num_rows:
                    data, kept = encode_up_to(res.records, limit, epoch)
                    arrow = res.records.nbytes * kept / res.records.num_rows
                    ratios[key] = min(max(len(data) / max(arrow, 1.0), _MIN_RATIO), 1.0)
                budget -= len(data)
                total += len(data)
                starts[key] = (res.log_start_offset, time.monotonic())
                out.update(
                    error_code=0,
                    high_watermark=res.high_watermark,
                    last_stable_offset=res.high_watermark,
                    log_start_offset=res.log_start_offset,
                    records=data,
                )
            except TopiclakeError as exc:
                out["error_code"] = kerr.code_for(exc)
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return topics, total


def _single(body: Any) -> bool:
    return len(body.topics) == 1 and len(body.topics[0].partitions) == 1


def _caught_up(ctx: Context, body: Any) -> list[dict[str, Any]] | None:
    """The answer to a fetch with nothing to read, made without I/O, or None if it cannot be.

    Every partition asked must be open and led here, asked from its high watermark, and have had its log
    start answered by a fetch within the last second (nothing here reads the table).
    """
    starts: dict[tuple[str, int], tuple[int, float]] = ctx.state.get(_LOG_STARTS, {})
    now = time.monotonic()
    topics = []
    for t in body.topics:
        log = ctx.broker.open_log(str(t.topic))
        if log is None:
            return None
        parts = []
        for p in t.partitions:
            partition = int(p.partition)
            seen = starts.get((str(t.topic), partition))
            if seen is None or now - seen[1] > _LOG_START_TTL_S or not log.leads(partition):
                return None
            try:
                hwm = log.high_watermark(partition)
            except TopiclakeError:
                return None
            if int(p.fetch_offset) != hwm:
                return None
            parts.append(
                {
                    "partition_index": partition,
                    "error_code": 0,
                    "high_watermark": hwm,
                    "last_stable_offset": hwm,
                    "log_start_offset": seen[0],
                    "aborted_transactions": [],
                    "preferred_read_replica": -1,
                    "records": b"",
                }
            )
        topics.append({"topic": t.topic, "partitions": parts})
    return topics


async def fetch(ctx: Context, req: Request) -> dict[str, Any]:
    """Fetch: sessionless (session id 0); waits up to max_wait_ms until min_bytes are there."""
    body = req.body
    max_wait = max(ms(body.max_wait), 0)
    min_bytes = max(int(body.min_bytes), 0)
    deadline = time.monotonic() + max_wait / 1000
    caught = _caught_up(ctx, body)
    if caught is not None and (max_wait == 0 or min_bytes == 0):
        topics = caught  # nothing to read, and no wait asked for
    elif _single(body):  # one partition: let the log's own long poll wake us on the commit
        wait = float(max_wait) if min_bytes > 0 else 0.0
        run = ctx.run_poll if wait > 0 else ctx.run
        topics, _n = await run(_fetch_once, ctx, body, wait)
    else:
        while True:
            if caught is None:
                topics, n = await ctx.run(_fetch_once, ctx, body, 0.0)
                if n >= min_bytes or n > 0:
                    break
            else:
                topics = caught
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(_POLL_S, remaining))
            caught = _caught_up(ctx, body)
    return {"error_code": 0, "session_id": 0, "responses": topics}


def _list_one(ctx: Context, topic: str, partition: int, ts: int) -> dict[str, Any]:
    out: dict[str, Any] = {"partition_index": partition, "timestamp": -1, "offset": -1, "leader_epoch": 0}
    try:
        if ts == -1:
            off = ctx.broker.list_offsets(topic, partition, "latest")
        elif ts == -2:
            off = ctx.broker.list_offsets(topic, partition, "earliest")
        elif ts == -3:  # max timestamp: the last record
            end = ctx.broker.list_offsets(topic, partition, "latest")
            off = end - 1 if end else None
        else:
            off = ctx.broker.list_offsets(topic, partition, ts)
        if off is None:
            return {**out, "error_code": 0}
        stamp = -1
        if ts >= 0 or ts == -3:
            rows = ctx.broker.fetch(topic, partition, off, 1, 1).records
            if rows.num_rows:
                stamp = int(pc.cast(rows["timestamp"], "int64")[0].as_py()) // 1000
        return {**out, "error_code": 0, "offset": off, "timestamp": stamp}
    except TopiclakeError as exc:
        return {**out, "error_code": kerr.code_for(exc)}


def _list_sync(ctx: Context, body: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                _list_one(ctx, str(t.name), int(p.partition_index), int(p.timestamp)) for p in t.partitions
            ],
        }
        for t in body.topics
    ]


async def list_offsets(ctx: Context, req: Request) -> dict[str, Any]:
    """ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or the first offset at a timestamp."""
    return {"topics": await ctx.run(_list_sync, ctx, req.body)}
