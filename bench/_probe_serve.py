"""``topiclake serve`` with stall probes: where a gateway's latency tail comes from (bench only).

Run as ``python bench/_probe_serve.py OUT.json serve --warehouse ...`` (bench/http_wrk.py --probe does).
Nothing here is in the hot path of a normal gateway. At exit it writes to ``OUT.json``:

- ``gc``: the garbage collections once serving, per generation: wall pause and the CPU time of the
  collecting thread (``gc.callbacks``; wall minus CPU is time the machine gave to other processes);
- ``loop_lag``: how late a callback posted to the event loop every 5 ms ran (the loop was busy with one
  long step, or could not get the GIL); each lag over 10 ms with what was seen at that moment (a GC
  running, the other threads' innermost frames);
- with ``HOT_PROBE_PROFILE=FILE`` in the environment, a cProfile of the event loop's thread while serving;
- ``gil_late``: how late this probe's own 2 ms sleeps woke up (someone held the GIL, or the CPU was taken
  by other processes on a shared machine).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

OUT = sys.argv[1]
_gc_start = 0.0
_gc_running = False
gc_pauses: list[tuple[int, float]] = []
lags: list[float] = []
late: list[float] = []
events: list[dict[str, Any]] = []
_loop: asyncio.AbstractEventLoop | None = None


_gc_cpu = 0.0
gc_cpu: list[tuple[int, float]] = []


def _gc_cb(phase: str, info: dict[str, int]) -> None:
    global _gc_start, _gc_running, _gc_cpu
    if phase == "start":
        _gc_start, _gc_cpu, _gc_running = time.perf_counter(), time.thread_time(), True
    else:
        _gc_running = False
        if _loop is None:  # startup: not a request's pause
            return
        gc_pauses.append((info["generation"], (time.perf_counter() - _gc_start) * 1000))
        gc_cpu.append((info["generation"], (time.thread_time() - _gc_cpu) * 1000))


def _frames() -> dict[str, str]:
    names = {t.ident: t.name for t in threading.enumerate()}
    out = {}
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        stack = traceback.extract_stack(frame)[-3:]
        out[names.get(ident, str(ident))] = " <- ".join(
            f"{s.name}:{s.filename.split('/')[-1]}" for s in stack[::-1]
        )
    return out


def _watch() -> None:
    posted: list[float] = []

    def beat(t: float) -> None:
        lag = (time.perf_counter() - t) * 1000
        lags.append(lag)
        if lag > 10 and len(events) < 400:
            events.append({"lag_ms": round(lag, 1), "gc": _gc_running, "last_gc": gc_pauses[-1:]})

    next_beat = 0.0
    while True:
        t0 = time.perf_counter()
        time.sleep(0.002)
        woke = (time.perf_counter() - t0) * 1000 - 2
        late.append(woke)
        if woke > 15 and _loop is not None and len(events) < 400:
            events.append({"gil_late_ms": round(woke, 1), "gc": _gc_running, "threads": _frames()})
        if _loop is not None and time.perf_counter() >= next_beat:
            next_beat = time.perf_counter() + 0.005
            now = time.perf_counter()
            posted.append(now)
            try:
                _loop.call_soon_threadsafe(beat, now)
            except RuntimeError:
                return


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def _dump() -> None:
    by_gen: dict[str, Any] = {}
    for g in (0, 1, 2):
        ms = [p for gen, p in gc_pauses if gen == g]
        cpu = [p for gen, p in gc_cpu if gen == g]
        by_gen[str(g)] = {
            "count": len(ms),
            "p50_ms": _pct(ms, 0.5),
            "max_ms": round(max(ms, default=0), 2),
            "cpu_p50_ms": _pct(cpu, 0.5),
            "cpu_max_ms": round(max(cpu, default=0), 2),
            "cpu_sum_ms": round(sum(cpu), 1),
        }
    from collections import Counter

    old = Counter(type(o).__name__ for o in gc.get_objects(2)).most_common(12)
    report = {
        "gen2_objects": len(gc.get_objects(2)),
        "gen2_types": old,
        "gc": by_gen,
        "gc_frozen": gc.get_freeze_count(),
        "gc_threshold": gc.get_threshold(),
        "loop_lag": {
            "n": len(lags),
            "p50_ms": _pct(lags, 0.5),
            "p99_ms": _pct(lags, 0.99),
            "p999_ms": _pct(lags, 0.999),
            "max_ms": round(max(lags, default=0), 1),
            "over_10ms": sum(1 for x in lags if x > 10),
            "over_50ms": sum(1 for x in lags if x > 50),
        },
        "gil_late": {
            "n": len(late),
            "p50_ms": _pct(late, 0.5),
            "p99_ms": _pct(late, 0.99),
            "max_ms": round(max(late, default=0), 1),
            "over_15ms": sum(1 for x in late if x > 15),
        },
        "events": events,
    }
    with open(OUT, "w") as f:
        json.dump(report, f, indent=1)


def main() -> None:
    import uvicorn

    gc.callbacks.append(_gc_cb)
    original = uvicorn.Server.startup

    profile_to = os.environ.get("HOT_PROBE_PROFILE")  # a cProfile of the event loop's thread
    profiler = cProfile.Profile() if profile_to else None

    async def startup(self: Any, sockets: Any = None) -> None:
        global _loop
        await original(self, sockets)  # the app's startup (and its gc.collect) is not a request's pause
        _loop = asyncio.get_running_loop()
        if profiler is not None:
            profiler.enable()

    original_shutdown = uvicorn.Server.shutdown

    async def shutdown(self: Any, sockets: Any = None) -> None:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile_to))
        await original_shutdown(self, sockets)
        _dump()  # uvicorn re-raises SIGTERM after its shutdown: atexit would not run

    uvicorn.Server.startup = startup  # type: ignore[method-assign]
    uvicorn.Server.shutdown = shutdown  # type: ignore[method-assign]
    threading.Thread(target=_watch, name="probe", daemon=True).start()
    from topiclake.cli import app

    sys.argv = ["topiclake", *sys.argv[2:]]
    app()


if __name__ == "__main__":
    main()
