"""Console pages: consumer groups -- state, members, committed offsets, lag and its history; reset, delete."""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from topiclake.console import access
from topiclake.console.common import BrokerDep, SamplerDep, is_htmx, page
from topiclake.errors import TopiclakeError
from topiclake.platform import Broker
from topiclake.platform.groups.group_coordinator import ResetPlanEntry, ResetTo

router = APIRouter(prefix="/ui", include_in_schema=False)

RESET_TO = ("earliest", "latest", "offset", "timestamp", "shift")


@router.get("/groups", response_class=HTMLResponse)
def groups(request: Request, broker: BrokerDep, sampler: SamplerDep) -> HTMLResponse:
    """Every group (the principal may Describe) with its state, members and total lag (over the topics
    it may Describe)."""
    visible = access.visible(request)
    rows = []
    for g in broker.groups.list_groups():
        if not visible.group(g.group_id):
            continue
        try:
            lag: int | None = sum(r.lag for r in broker.groups.lag(g.group_id) if visible.topic(r.topic))
        except TopiclakeError:
            lag = None
        rows.append((g, lag))
    growing = set(sampler.growing_lag([g.group_id for g, _ in rows])) if sampler is not None else set()
    return page(request, "groups.html", active="groups", groups=rows, growing=growing)


def _group_page(request: Request, broker: Broker, group_id: str, **extra: Any) -> HTMLResponse:
    visible = access.visible(request)  # offsets of topics the principal may Describe, as the API's
    try:
        description = broker.groups.describe(group_id)
        lag = [r for r in broker.groups.lag(group_id) if visible.topic(r.topic)]
    except TopiclakeError as exc:
        return page(request, "_message.html", 404, error=exc.message)
    committed = {tp: c for tp, c in broker.groups.committed(group_id).items() if visible.topic(tp[0])}
    topics = sorted({r.topic for r in lag})
    shown = lag[:8]  # the total and up to 8 partitions on the chart
    names = [f"lag:{group_id}", *(f"lag:{group_id}:{r.topic}:{r.partition}" for r in shown)]
    labels = ["total", *(f"{r.topic}/{r.partition}" for r in shown)]
    return page(
        request,
        "group.html",
        active="groups",
        group=description,
        lag=lag,
        committed=committed,
        total_lag=sum(r.lag for r in lag),
        topics=topics,
        reset_to=RESET_TO,
        series_names=names,
        series_labels=labels,
        **extra,
    )


@router.get("/groups/{group_id}", response_class=HTMLResponse)
def group(request: Request, group_id: str, broker: BrokerDep) -> HTMLResponse:
    """One group: members and their partitions, committed offsets, lag per partition and its history."""
    return _group_page(request, broker, group_id)


@router.post("/groups/{group_id}/reset", response_class=HTMLResponse)
def reset(
    request: Request,
    group_id: str,
    broker: BrokerDep,
    to: str = Form(...),
    value: str = Form(""),
    topic: str = Form(""),
    apply: str = Form(""),
) -> HTMLResponse:
    """Reset offsets like ``kafka-consumer-groups --reset-offsets``: a dry run first; ``apply`` executes
    the same request. Only for a group with no active members."""
    if not access.allowed(request, "Read", f"group:{group_id}"):
        return page(request, "_message.html", 403, error="not allowed to reset this group")
    plan: list[ResetPlanEntry] = []
    error = None
    dry_run = not apply
    try:
        if to not in RESET_TO:
            raise ValueError(f"reset to one of {', '.join(RESET_TO)}")
        number = int(value) if value.strip() else None
        if to in ("offset", "timestamp", "shift") and number is None:
            raise ValueError(f"reset to {to} needs a value")
        plan = broker.groups.reset_offsets(
            group_id,
            cast(ResetTo, to),
            number,
            topics=[topic] if topic else None,
            dry_run=dry_run,
        )
    except ValueError as exc:
        error = str(exc)
    except TopiclakeError as exc:
        error = exc.message
    context: dict[str, Any] = {
        "group_id": group_id,
        "plan": plan,
        "dry_run": dry_run,
        "error": error,
        "form": {"to": to, "value": value, "topic": topic},
    }
    if is_htmx(request):
        response = page(request, "_reset_plan.html", **context)
        if not dry_run and error is None:
            response.headers["hx-refresh"] = "true"  # the page shows the new committed offsets
        return response
    return _group_page(request, broker, group_id, reset=context)


@router.post("/groups/{group_id}/delete", response_model=None)
def delete(request: Request, group_id: str, broker: BrokerDep) -> Response:
    """Delete a group and its committed offsets (only without members)."""
    if not access.allowed(request, "Delete", f"group:{group_id}"):
        return page(request, "_message.html", 403, error="not allowed to delete this group")
    try:
        broker.groups.delete_group(group_id)
    except TopiclakeError as exc:
        return _group_page(request, broker, group_id, delete_error=exc.message)
    if is_htmx(request):
        return Response(status_code=200, headers={"hx-redirect": "/ui/groups"})
    return RedirectResponse("/ui/groups", status_code=303)
