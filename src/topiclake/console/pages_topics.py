"""Console pages: overview, topics, a topic (configs, produce form), jobs, and the charts' data."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from topiclake.console import access, views
from topiclake.console.assets import missing
from topiclake.console.common import BrokerDep, SamplerDep, is_htmx, page
from topiclake.console.sampler import Sampler
from topiclake.errors import InvalidRecord, TopiclakeError, TopicNotFound
from topiclake.platform import Record

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("", response_class=HTMLResponse)
def overview(request: Request, broker: BrokerDep, sampler: SamplerDep) -> HTMLResponse:
    """Brokers, totals, produce/fetch rates and warnings."""
    view = views.overview(broker, sampler, missing(), access.visible(request))
    return page(request, "overview.html", active="overview", view=view)


@router.get("/topics", response_class=HTMLResponse)
def topics(request: Request, broker: BrokerDep, sampler: SamplerDep) -> HTMLResponse:
    """Every topic (the principal may Describe) with partitions, replication, retention, size and files."""
    rows = views.topic_rows(broker, sampler, visible=access.visible(request))
    return page(request, "topics.html", active="topics", topics=rows)


@router.post("/topics", response_model=None)
def create_topic(
    request: Request,
    broker: BrokerDep,
    sampler: SamplerDep,
    name: str = Form(...),
    partitions: int = Form(1),
    retention_ms: str = Form(""),
    cleanup_policy: str = Form("delete"),
) -> Response:
    """Create a topic (and its table) from the form, then show it."""
    if not access.allowed(request, "Create", "cluster"):
        return page(request, "_message.html", 403, error="not allowed to create topics")
    configs: dict[str, str | int] = {"cleanup.policy": cleanup_policy}
    if retention_ms.strip():
        configs["retention.ms"] = retention_ms.strip()
    try:
        broker.create_topic(name.strip(), partitions, configs)
    except TopiclakeError as exc:
        rows = views.topic_rows(broker, sampler, visible=access.visible(request))
        return page(request, "topics.html", 400, active="topics", topics=rows, create_error=exc.message)
    return RedirectResponse(f"/ui/topics/{quote(name.strip())}", status_code=303)


def _topic_page(
    request: Request, broker: BrokerDep, sampler: SamplerDep, name: str, **extra: Any
) -> HTMLResponse:
    try:
        info = broker.describe_topic(name)
    except TopicNotFound as exc:
        return page(request, "_message.html", 404, error=exc.message)
    row = views.topic_row(broker, info, broker.metadata(), sampler)
    return page(
        request,
        "topic.html",
        active="topics",
        topic=row,
        configs=views.config_rows(info),
        commands=views.job_commands(broker.storage.root, name),
        **extra,
    )


@router.get("/topics/{name}", response_class=HTMLResponse)
def topic(request: Request, name: str, broker: BrokerDep, sampler: SamplerDep) -> HTMLResponse:
    """One topic: partitions with leaders and offsets, the Delta side, configs, records/s, produce."""
    return _topic_page(request, broker, sampler, name)


@router.post("/topics/{name}/configs", response_class=HTMLResponse)
def alter_config(
    request: Request,
    name: str,
    broker: BrokerDep,
    sampler: SamplerDep,
    config: str = Form(...),
    value: str = Form(""),
    reset: str = Form(""),
) -> HTMLResponse:
    """Set one config (or reset it to the default) -- for whoever may AlterConfigs the topic."""
    if not access.allowed(request, "AlterConfigs", f"topic:{name}"):
        return page(request, "_message.html", 403, error="not allowed to alter this topic's configs")
    try:
        if reset:
            info = broker.alter_topic_configs(name, delete=[config])
        else:
            info = broker.alter_topic_configs(name, {config: value})
        message, error = f"{config} = {info.config.get(config)}", None
    except TopiclakeError as exc:
        info, message, error = broker.describe_topic(name), None, exc.message
    if is_htmx(request):
        return page(
            request,
            "_configs.html",
            topic=name,
            configs=views.config_rows(info),
            message=message,
            error=error,
        )
    return _topic_page(request, broker, sampler, name, config_message=message, config_error=error)


def _headers(text: str) -> list[tuple[str, bytes | None]]:
    headers: list[tuple[str, bytes | None]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise InvalidRecord(f"header line {line!r} is not key=value")
        headers.append((key.strip(), value.encode()))
    return headers


@router.post("/topics/{name}/produce", response_class=HTMLResponse)
async def produce(
    request: Request,
    name: str,
    broker: BrokerDep,
    sampler: SamplerDep,
    key: str = Form(""),
    value: str = Form(""),
    headers: str = Form(""),
    partition: str = Form(""),
) -> HTMLResponse:
    """Produce one record (acks=all) from the form: key, value, headers (key=value lines), partition."""
    if not access.allowed(request, "Write", f"topic:{name}"):
        return page(request, "_message.html", 403, error="not allowed to write to this topic")
    result, error = None, None
    try:
        record = Record(
            key=key.encode() if key else None,
            value=value.encode(),
            headers=_headers(headers),
            partition=int(partition) if partition.strip() else None,
        )
        started = time.perf_counter()
        results = await run_in_threadpool(broker.produce, name, [record])
        result = results[0]
        if result.error is not None:
            error, result = result.error.message, None
        else:
            request.app.state.metrics.produced(name, 1, record.size(), "console", "all", started)
    except ValueError:
        error = f"partition must be a number, not {partition!r}"
    except TopiclakeError as exc:
        error = exc.message
    if is_htmx(request):
        return page(request, "_produced.html", result=result, error=error, topic=name)
    return _topic_page(request, broker, sampler, name, produced=result, produce_error=error)


@router.get("/jobs", response_class=HTMLResponse)
def jobs(request: Request, broker: BrokerDep, sampler: SamplerDep) -> HTMLResponse:
    """The newest compaction, retention and VACUUM of every topic (the principal may Describe), and the
    command to run one."""
    visible = access.visible(request)
    rows = views.topic_rows(broker, sampler, history=100, visible=visible)
    commands = {t.info.name: views.job_commands(broker.storage.root, t.info.name) for t in rows}
    maintenance = {log.topic: log.maintainer.stats for log in broker.open_logs() if visible.topic(log.topic)}
    return page(request, "jobs.html", active="jobs", topics=rows, commands=commands, maintenance=maintenance)


def _points(sampler: Sampler, name: str, visible: access.Visible) -> dict[float, float]:
    """One series' points as the principal may see them: a topic's or group's own series only if it may
    Describe it, the all-topics rates (``produce:*``) summed over the topics it may Describe."""
    if visible.everything:
        return dict(sampler.series(name))
    kind, _, rest = name.partition(":")
    if kind in ("produce", "fetch") and rest == "*":
        topics = [n for n in sampler.names(f"{kind}:") if n != name and visible.topic(n.partition(":")[2])]
        return _sum(sampler, topics)
    if kind in ("produce", "fetch") and visible.topic(rest):
        return dict(sampler.series(name))
    if kind == "lag":  # lag:<group>:<topic>:<partition> (topic names have no ':'), or lag:<group>
        parts = rest.rsplit(":", 2)
        if len(parts) == 3 and parts[2].isdigit():
            if visible.group(parts[0]) and visible.topic(parts[1]):
                return dict(sampler.series(name))
        elif visible.group(rest):  # the total over the partitions of topics it may Describe
            return _sum(sampler, [n for n in sampler.names(f"{name}:") if _lag_of(n, rest, visible)])
    return {}


def _lag_of(name: str, group: str, visible: access.Visible) -> bool:
    parts = name.split(":", 1)[1].rsplit(":", 2)
    return len(parts) == 3 and parts[0] == group and parts[2].isdigit() and visible.topic(parts[1])


def _sum(sampler: Sampler, names: list[str]) -> dict[float, float]:
    total: dict[float, float] = {}
    for each in names:
        for t, v in sampler.series(each):
            total[t] = total.get(t, 0.0) + v
    return total


@router.get("/data/series")
def series(request: Request, sampler: SamplerDep, name: Annotated[list[str], Query()]) -> JSONResponse:
    """Chart data: ``{"t": [...], "series": {name: [...]}}`` with one shared time axis (uPlot's shape);
    series of topics and groups the principal may not Describe are empty."""
    if sampler is None:
        return JSONResponse({"t": [], "series": {}, "interval_s": None})
    visible = access.visible(request)
    points = {n: _points(sampler, n, visible) for n in name}
    times = sorted({t for p in points.values() for t in p})
    return JSONResponse(
        {
            "t": times,
            "series": {n: [p.get(t) for t in times] for n, p in points.items()},
            "interval_s": sampler.interval_s,
        }
    )
