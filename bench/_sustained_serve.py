"""``topiclake serve`` with finer buckets on its produce and fetch latency histograms (bench only).

Run as ``python bench/_sustained_serve.py [--probe OUT.json] serve --warehouse ...`` (bench/sustained.py
does, unless ``--coarse-buckets``). The gateway's own buckets jump from 50 to 100 ms, where the produce
p99 of the sustained load lies, so a p99 interpolated in them says little; these add steps of 5-25 ms
up to 250 ms. Nothing else changes. With ``--probe OUT.json`` the gateway also runs under
bench/_probe_serve.py's stall probes (GC pauses, event-loop lag, late wake-ups), written to OUT.json at
exit.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import topiclake.api.metrics as metrics

FINE_BUCKETS = (
    *(x / 1000 for x in (1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 70, 80, 90, 100)),
    *(x / 1000 for x in (110, 120, 130, 140, 150, 175, 200, 250, 500)),
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


def main() -> None:
    metrics._LATENCY_BUCKETS = FINE_BUCKETS  # read when the app makes its registry (GatewayMetrics)
    args = sys.argv[1:]
    if args[:1] == ["--probe"]:
        sys.argv = [str(Path(__file__).with_name("_probe_serve.py")), *args[1:]]
        runpy.run_path(sys.argv[0], run_name="__main__")
        return
    from topiclake.cli import app

    sys.argv = ["topiclake", *args]
    app()


if __name__ == "__main__":
    main()
