"""Shared by the console's pages: templates, filters, the sampler of the app, rendering a page or a part."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from topiclake.console import access, assets, render
from topiclake.console.sampler import Sampler
from topiclake.platform import Broker


def _bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(ms: int | str | None) -> str:
    if ms is None:
        return "-"
    n = int(ms)
    if n < 0:
        return "forever"
    for size, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} ms"


def _num(n: int | float | None) -> str:
    return "-" if n is None else f"{n:,}"


templates = Jinja2Templates(directory=str(assets.TEMPLATES))
templates.env.filters.update(bytes=_bytes, when=_when, duration=_duration, num=_num)
templates.env.globals.update(formats=render.formats)


async def get_broker(request: Request) -> Broker:
    """The broker of this gateway."""
    broker: Broker = request.app.state.broker
    return broker


async def get_sampler(request: Request) -> Sampler | None:
    """The console's sampler (None before the lifespan started it)."""
    sampler: Sampler | None = getattr(request.app.state, "console_sampler", None)
    return sampler


BrokerDep = Annotated[Broker, Depends(get_broker)]
SamplerDep = Annotated[Sampler | None, Depends(get_sampler)]


def is_htmx(request: Request) -> bool:
    """Whether htmx made the request (answer with a part of a page, not a whole page)."""
    return request.headers.get("hx-request") == "true"


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a template with what every page needs (navigation, missing assets, who may do what)."""
    context.setdefault("active", "")
    return templates.TemplateResponse(
        request,
        name,
        {
            "missing_assets": assets.missing(),
            "principal": access.principal(request),
            "allowed": lambda action, resource: access.allowed(request, action, resource),
            **context,
        },
        status_code=status_code,
    )
