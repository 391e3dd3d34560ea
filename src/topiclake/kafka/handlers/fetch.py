"""Fetch (long-poll with max_wait_ms/min_bytes, records re-encoded as RecordBatch v2) and ListOffsets."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow.compute as pc

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka import records
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.context import Context

_POLL_S = 0.02
_MAX_RECORDS = 100_000


def _fetch_once(ctx: Context, body: Any, wait_ms: float) -> tuple[list[dict[str, Any]], int]:
    total = 0
    budget = max(int(getattr(body, "max_bytes", 0x7FFFFFFF)), 1)
    epoch = 0
    topics = []
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
            try:
                limit = max(min(int(p.partition_max_bytes), budget), 1)
                res = ctx.broker.fetch(
                    str(t.topic), int(p.partition), int(p.fetch_offset), _MAX_RECORDS, limit, wait_ms
                )
                data = records.encode(res.records, epoch) if budget > 0 else b""
                budget -= len(data)
                total += len(data)
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


async def fetch(ctx: Context, req: Request) -> dict[str, Any]:
    """Fetch: sessionless (session id 0); waits up to max_wait_ms until min_bytes are there."""
    body = req.body
    max_wait = max(ms(body.max_wait), 0)
    min_bytes = max(int(body.min_bytes), 0)
    deadline = time.monotonic() + max_wait / 1000
    if _single(body):  # one partition: let the log's own long poll wake us on the commit
        wait = float(max_wait) if min_bytes > 0 else 0.0
        run = ctx.run_poll if wait > 0 else ctx.run
        topics, _n = await run(_fetch_once, ctx, body, wait)
    else:
        while True:
            topics, n = await ctx.run(_fetch_once, ctx, body, 0.0)
            remaining = deadline - time.monotonic()
            if n >= min_bytes or n > 0 or remaining <= 0:
                break
            await asyncio.sleep(min(_POLL_S, remaining))
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
