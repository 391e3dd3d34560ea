"""Keeping CPython's full garbage collections off the request path.

A started gateway holds a few hundred thousand long-lived container objects (FastAPI and pydantic models,
OpenAPI schemas, modules). CPython's generation-2 collection walks all of them: measured under load
(bench/hot_probe.py) one took 100-400 ms, every second or two, with the event loop and every thread
stopped: that was the gateway's ~100 ms p99 tail. :func:`settle` collects the young generations once,
then moves every object alive into the permanent generation (``gc.freeze``) so that later collections
only walk what was made since. The young generations keep CPython's thresholds: raising them was measured
to make each young collection longer (a 1,000-record request's objects are alive when it runs) without
making all of them cheaper. Objects still free normally by reference counting; only cycles among the
frozen objects (there are none to speak of once startup is over) would stay. A full collection before the
freeze found nothing to free after the broker's imports (0 objects of ~157,000) and cost ~0.1 CPU-s of
every start.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)

_settled = False


def settle() -> None:
    """Collect the young generations, then freeze what is alive; once per process (idempotent)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect(1)
    gc.freeze()
    logger.info("gc: %d objects frozen out of the collector", gc.get_freeze_count())
