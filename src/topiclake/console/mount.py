"""Mounting the console on a gateway app: its pages, its static files, and its sampler's lifetime."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from topiclake.console import access, assets, pages_groups, pages_messages, pages_topics
from topiclake.console.sampler import OBJECT_STORE_JOBS_S, Sampler

logger = logging.getLogger(__name__)


def mount(
    app: FastAPI,
    interval_s: float = 10.0,
    access_of: access.AccessOf | None = None,
    object_scan_s: float = OBJECT_STORE_JOBS_S,
) -> None:
    """Serve the console at ``/ui`` on ``app`` and sample its charts every ``interval_s`` seconds (on
    object storage the topics' histories and the offsets table's log every ``object_scan_s``).

    ``access_of`` answers who may see and do what (the gateway's ACLs, :mod:`topiclake.console.access`);
    None allows everything. The sampler starts after the app's own lifespan has made the broker and stops
    before it closes it.
    """
    access.install(app, access_of)
    for module in (pages_topics, pages_messages, pages_groups, assets):
        app.include_router(module.router)
    app.mount("/ui/static", StaticFiles(directory=assets.STATIC), name="console-static")
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any) -> AsyncIterator[Any]:
        async with inner(target) as state:
            metrics = app.state.metrics
            sampler = Sampler(
                app.state.broker,
                metrics.records_in,
                metrics.records_out,
                interval_s,
                object_scan_s=object_scan_s,
            )
            app.state.console_sampler = sampler
            sampler.start()
            missing = assets.missing()
            if missing:
                logger.warning(
                    "console: %s not installed (run `make install`): /ui works without charts and "
                    "live updates",
                    ", ".join(missing),
                )
            try:
                yield state
            finally:
                sampler.close()

    app.router.lifespan_context = lifespan
