"""Fetch (long-poll with max_wait_ms/min_bytes, records re-encoded as RecordBatch v2) and ListOffsets.

A fetch that memory can answer is answered on the event loop, without a thread: every partition asked
at its end (a consumer at the tail, Kafka's EndToEndLatency polling with ``fetch.max.wait.ms=0``) or a
few records behind it in the in-memory tail. A fetch that waits for records registers a watcher on each
partition it asks for and the flusher wakes the loop as the commit lands (no pool thread, no polling);
the records it then finds in the tail are encoded on the loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from functools import partial
from typing import Any

import pyarrow.compute as pc

from topiclake.errors import TopiclakeError
from topiclake.kafka import errors as kerr
from topiclake.kafka.batch_encoder import encode_up_to
from topiclake.kafka.codec import Request, ms
from topiclake.kafka.context import Context
from topiclake.kafka.read_ahead import READ_AHEAD, Answer, ReadAhead

_POLL_S = 0.005
_MAX_RECORDS = 100_000
#: A fetch is answered on the event loop from the in-memory tail up to this many records and Arrow bytes
#: (a consumer at the tail woken by a commit: no thread hand-off); more is read on the listener's threads.
_LOOP_MAX_RECORDS = 1024
_LOOP_MAX_BYTES = 256 * 1024
#: How long a partition's log start offset, as a fetch last answered it, may be repeated by a caught-up one.
_LOG_START_TTL_S = 1.0
_LOG_STARTS = "fetch_log_starts"  # key in Context.state: (topic, partition) -> (log start, when)
# The log bounds a read by Arrow bytes; a fetch asks it for partition_max_bytes divided by the ratio of
# encoded to Arrow bytes the partition's last fetch found, and the encoder cuts at the exact size.
_RATIOS = "fetch_encoded_ratio"  # key in Context.state: (topic, partition) -> encoded bytes per Arrow byte
_MIN_RATIO = 0.25


def _read(
    ctx: Context, topic: str, partition: int, offset: int, limit: int, ratio: float, wait_ms: float
) -> Answer:
    """Read a partition from ``offset`` and encode up to ``limit`` bytes of it."""
    res = ctx.broker.fetch(topic, partition, offset, _MAX_RECORDS, max(int(limit / ratio), 1), wait_ms)
    data, new_ratio, next_offset = b"", None, offset
    if res.records.num_rows:
        data, kept = encode_up_to(res.records, limit, 0)
        arrow = res.records.nbytes * kept / res.records.num_rows
        new_ratio = min(max(len(data) / max(arrow, 1.0), _MIN_RATIO), 1.0)
        next_offset = int(res.records["offset"][kept - 1].as_py()) + 1
    return Answer(data, res.high_watermark, res.log_start_offset, new_ratio, next_offset)


def _answer(
    ctx: Context, key: tuple[str, int], offset: int, limit: int, wait_ms: float, ratios: dict[Any, float]
) -> Answer:
    """A partition's answer: read ahead by the previous fetch if it was, else read now; and when this
    one was cut by its limit with more committed after it, the next one read ahead (read_ahead.py)."""
    ahead: ReadAhead | None = ctx.state.get(READ_AHEAD)
    answer = ahead.take((*key, offset, limit)) if ahead is not None else None
    if answer is None or not answer.data:
        answer = _read(ctx, key[0], key[1], offset, limit, ratios.get(key, 1.0), wait_ms)
    if answer.ratio is not None:
        ratios[key] = answer.ratio
    if ahead is not None and answer.next_offset < answer.high_watermark and 2 * len(answer.data) >= limit:
        after = answer.next_offset
        ahead.start((*key, after, limit), partial(_read, ctx, *key, after, limit, ratios.get(key, 1.0), 0.0))
    return answer


def _fetch_once(ctx: Context, body: Any, wait_ms: float) -> tuple[list[dict[str, Any]], int]:
    total = 0
    budget = max(int(getattr(body, "max_bytes", 0x7FFFFFFF)), 1)
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
                if budget > 0:
                    limit = max(min(int(p.partition_max_bytes), budget), 1)
                    answer = _answer(ctx, key, int(p.fetch_offset), limit, wait_ms, ratios)
                    data = answer.data
                else:  # the fetch's byte budget is spent: the partition's ends only
                    res = ctx.broker.fetch(key[0], key[1], int(p.fetch_offset), 1, 1, wait_ms)
                    answer = Answer(b"", res.high_watermark, res.log_start_offset, None, 0)
                    data = b""
                budget -= len(data)
                total += len(data)
                starts[key] = (answer.log_start_offset, time.monotonic())
                out.update(
                    error_code=0,
                    high_watermark=answer.high_watermark,
                    last_stable_offset=answer.high_watermark,
                    log_start_offset=answer.log_start_offset,
                    records=data,
                )
            except TopiclakeError as exc:
                out["error_code"] = kerr.code_for(exc)
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return topics, total


def _single(body: Any) -> bool:
    return len(body.topics) == 1 and len(body.topics[0].partitions) == 1


def _from_memory(ctx: Context, body: Any) -> tuple[list[dict[str, Any]], int] | None:
    """The answer to a fetch made from memory on the event loop, or None if it cannot be.

    Every partition asked must be open and led here, asked from its high watermark (nothing to read) or
    from an offset the in-memory tail holds with at most :data:`_LOOP_MAX_RECORDS` records and
    :data:`_LOOP_MAX_BYTES` bytes up to the end (a consumer at the tail, just woken by a commit), and
    have had its log start answered by a fetch within the last second (nothing here reads the table).
    """
    starts: dict[tuple[str, int], tuple[int, float]] = ctx.state.get(_LOG_STARTS, {})
    now = time.monotonic()
    budget = max(int(getattr(body, "max_bytes", 0x7FFFFFFF)), 1)
    total = 0
    topics = []
    for t in body.topics:
        log = ctx.broker.open_log(str(t.topic))
        if log is None:
            return None
        parts = []
        for p in t.partitions:
            partition, offset = int(p.partition), int(p.fetch_offset)
            seen = starts.get((str(t.topic), partition))
            if seen is None or now - seen[1] > _LOG_START_TTL_S or not log.leads(partition):
                return None
            try:
                hwm = log.high_watermark(partition)
                if offset != hwm and not 0 < hwm - offset <= _LOOP_MAX_RECORDS:
                    return None
                data = b""
                if offset < hwm and budget > 0:
                    tail = log.read_tail(partition, offset, _LOOP_MAX_RECORDS, _LOOP_MAX_BYTES + 1)
                    if tail is None or tail[0].nbytes > _LOOP_MAX_BYTES:
                        return None
                    records, hwm = tail
                    limit = max(min(int(p.partition_max_bytes), budget), 1)
                    data, _kept = encode_up_to(records, limit, 0)
            except TopiclakeError:
                return None
            budget -= len(data)
            total += len(data)
            parts.append(
                {
                    "partition_index": partition,
                    "error_code": 0,
                    "high_watermark": hwm,
                    "last_stable_offset": hwm,
                    "log_start_offset": seen[0],
                    "aborted_transactions": [],
                    "preferred_read_replica": -1,
                    "records": data,
                }
            )
        topics.append({"topic": t.topic, "partitions": parts})
    return topics, total


async def _appended(ctx: Context, body: Any, timeout_s: float) -> bool:
    """Wait until a commit moves the end of any partition asked past its fetch offset, or ``timeout_s``;
    False when one was past it already (nothing waited for).

    The flusher wakes the loop (:meth:`~topiclake.platform.log.topic_log.TopicLog.watch`); a partition
    that cannot be watched here (not open, led elsewhere) is looked at again every few milliseconds.
    """
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def done() -> None:
        if not woken.done():
            woken.set_result(None)

    def wake() -> None:  # on the flusher's thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(done)

    watched = []
    try:
        for t in body.topics:
            log = ctx.broker.open_log(str(t.topic))
            for p in t.partitions:
                if log is None or not log.leads(int(p.partition)):
                    timeout_s = min(timeout_s, _POLL_S)
                    continue
                try:
                    if not log.watch(int(p.partition), int(p.fetch_offset), wake):
                        return False  # records came meanwhile
                except TopiclakeError:
                    return False  # the fetch itself answers the error
                watched.append((log, int(p.partition)))
        timer = loop.call_later(timeout_s, done)
        try:
            await woken
        finally:
            timer.cancel()
        return True
    finally:
        for log, partition in watched:
            log.unwatch(partition, wake)


def _failed(topics: list[dict[str, Any]]) -> bool:
    """Whether a partition of the answer has an error (Kafka answers those without waiting)."""
    return any(p.get("error_code", 0) != 0 for t in topics for p in t["partitions"])


async def fetch(ctx: Context, req: Request) -> dict[str, Any]:
    """Fetch: sessionless (session id 0); waits up to max_wait_ms until min_bytes are there."""
    body = req.body
    max_wait = max(ms(body.max_wait), 0)
    min_bytes = max(int(body.min_bytes), 0)
    deadline = time.monotonic() + max_wait / 1000
    waiting = max_wait > 0 and min_bytes > 0
    first = True
    while True:
        answer = _from_memory(ctx, body)
        if answer is None and first and waiting and _single(body):
            # one partition the loop cannot answer: the log's own long poll, on a poll thread
            topics, _n = await ctx.run_poll(_fetch_once, ctx, body, float(max_wait))
            break
        topics, n = answer if answer is not None else await ctx.run(_fetch_once, ctx, body, 0.0)
        first = False
        remaining = deadline - time.monotonic()
        if not waiting or n >= min_bytes or n > 0 or remaining <= 0 or _failed(topics):
            break
        if not await _appended(ctx, body, remaining):
            # the end is past a fetch offset, yet nothing was read there (a gap): look again shortly
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
