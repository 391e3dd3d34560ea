"""Console page: the message browser of a topic, and its live tail's poll."""

from __future__ import annotations

import datetime as dt
from typing import cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from topiclake.console import access, render
from topiclake.console.browse import From, browse, tail
from topiclake.console.common import BrokerDep, page
from topiclake.errors import NotLeader, TopiclakeError
from topiclake.platform import Broker

router = APIRouter(prefix="/ui", include_in_schema=False)

MODES = ("end", "offset", "timestamp", "tail")


def _timestamp_ms(text: str) -> int | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` (UTC, as a datetime-local input sends it) or epoch milliseconds."""
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def _leader_link(broker: Broker, request: Request, exc: NotLeader) -> str | None:
    """The same page on the console of the broker that leads the partition, if metadata knows it."""
    state = broker.metadata().partition(str(exc.details.get("topic")), int(exc.details.get("partition", -1)))
    leader = broker.metadata().broker(state.leader) if state is not None else None
    if leader is None:
        return None
    query = f"?{request.url.query}" if request.url.query else ""
    return f"{request.url.scheme}://{leader.host}:{leader.port}{request.url.path}{query}"


def _positions(text: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in text.split(","):
        if ":" in part:
            p, o = part.split(":", 1)
            out[int(p)] = int(o)
    return out


def _encode(positions: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


@router.get("/topics/{name}/messages", response_class=HTMLResponse)
async def messages(
    request: Request,
    name: str,
    broker: BrokerDep,
    partition: str = Query("all"),
    mode: str = Query("end", alias="from"),
    offset: int = Query(0, ge=0),
    time: str = Query(""),
    limit: int = Query(50, ge=1, le=1000),
    format: str = Query("text"),
    key: str = Query(""),
) -> HTMLResponse:
    """Records of a partition (or all) from an offset, a timestamp, the end, or the live tail."""
    form = {
        "partition": partition,
        "from": mode,
        "offset": offset,
        "time": time,
        "limit": limit,
        "format": format,
        "key": key,
    }
    if not access.allowed(request, "Read", f"topic:{name}"):
        return page(request, "_message.html", 403, error="not allowed to read this topic")
    try:
        info = await run_in_threadpool(broker.describe_topic, name)
        if mode not in MODES:
            raise ValueError(f"from must be one of {', '.join(MODES)}")
        if format not in render.formats():
            raise ValueError(f"format must be one of {', '.join(render.formats())}")
        parts = list(range(info.partitions)) if partition == "all" else [int(partition)]
        if any(not 0 <= p < info.partitions for p in parts):
            raise ValueError(f"topic {name} has partitions 0 to {info.partitions - 1}")
        start: From = "end" if mode == "tail" else cast(From, mode)
        result = await run_in_threadpool(
            browse,
            broker,
            name,
            parts,
            start,
            offset,
            _timestamp_ms(time),
            limit,
            format,
            key,
        )
    except NotLeader as exc:  # in a cluster: send the reader to the partition's leader's console
        return page(request, "_message.html", 409, error=exc.message, link=_leader_link(broker, request, exc))
    except TopiclakeError as exc:
        return page(request, "_message.html", 404, error=exc.message)
    except ValueError as exc:
        return page(request, "_message.html", 400, error=str(exc))
    return page(
        request,
        "messages.html",
        active="topics",
        topic=info,
        form=form,
        page=result,
        positions=_encode(result.positions),
        live=mode == "tail",
    )


@router.get("/topics/{name}/messages/tail", response_class=HTMLResponse)
async def tail_poll(
    request: Request,
    name: str,
    broker: BrokerDep,
    pos: str = Query(""),
    format: str = Query("text"),
    key: str = Query(""),
) -> HTMLResponse:
    """The live tail's poll: records committed since ``pos`` (``partition:offset,...``), appended by htmx
    to the page, and the poller again with the new positions."""
    try:
        positions = _positions(pos)
    except ValueError:
        return page(request, "_message.html", 400, error=f"bad positions {pos!r}")
    result = await run_in_threadpool(tail, broker, name, positions, format, key)
    return page(
        request,
        "_tail.html",
        topic=name,
        records=result.records,
        positions=_encode(result.positions),
        format=format,
        key=key,
    )
