"""The hot path's rows only, with the gateway under stall probes: where the p99 tail comes from.

Run: ``.venv/bin/python bench/hot_probe.py [--seconds S] [--repeat N] [--env K=V ...]``. One bare FastAPI
reference and one gateway (bench/_probe_serve.py) per run; wrk rows as in bench/http_wrk.py, repeated
``--repeat`` times to show the noise. Prints the rows and the probe's summary (GC pauses per generation,
event-loop lag, late wake-ups of a 2 ms sleeper, and the stalls over 10 ms with what was running). Several
``--variant NAME:K=V,K=V`` gateways (settings as environment) run one after another in the same run, so
their numbers can be compared. Speed is never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx

from _common import GatewayProcess
from http_wrk import JSON, Bare, json_body, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--variant", action="append", default=[], help="NAME:K=V,K=V (gateway environment)")
    parser.add_argument("--rows", default="0,1,all,1000", help="acks values of 1-record rows, and/or 1000")
    args = parser.parse_args(argv)
    variants = [v.split(":", 1) for v in args.variant] or [["default", ""]]
    kinds = args.rows.split(",")
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hot-probe-") as tmp:
        root = Path(tmp)
        for rep in range(args.repeat):
            bare = Bare(root / "bare.log")
            try:
                r = load(
                    "bare POST",
                    bare.url,
                    ["/v1/topics/t/records"],
                    json_body(1),
                    1,
                    32,
                    args.seconds,
                    root,
                    headers=JSON,
                )
            finally:
                bare.stop()
            out.append(
                f"rep {rep} | bare POST 1 rec | {r.requests_per_s:,.0f} req/s "
                f"| p50 {r.p50_ms} | p99 {r.p99_ms}"
            )
            for name, spec in variants:
                env = {"TOPICLAKE_KAFKA_PORT": "0", "TOPICLAKE_SCHEMA_REGISTRY_PORT": "0"}
                env.update(dict(kv.split("=", 1) for kv in spec.split(",") if kv))
                probe = root / f"probe-{name}-{rep}.json"
                gw = GatewayProcess(
                    root / f"wh-{name}-{rep}",
                    root / f"gw-{name}.log",
                    env=env,
                    launcher=(str(Path(__file__).parent / "_probe_serve.py"), str(probe)),
                )
                try:
                    for topic in ("t", "big"):
                        httpx.post(f"{gw.url}/v1/topics", json={"name": topic, "partitions": 1}, timeout=30)
                        httpx.post(
                            f"{gw.url}/v1/topics/{topic}/records",
                            content=json_body(1),
                            headers=JSON,
                            timeout=30,
                        )
                    for kind in kinds:
                        if kind == "1000":
                            r = load(
                                "1000",
                                gw.url,
                                ["/v1/topics/big/records"],
                                json_body(1000),
                                1000,
                                4,
                                args.seconds,
                                root,
                                headers=JSON,
                            )
                            label = "1,000 JSON, 4 conn"
                        else:
                            r = load(
                                kind,
                                gw.url,
                                [f"/v1/topics/t/records?acks={kind}"],
                                json_body(1),
                                1,
                                32,
                                args.seconds,
                                root,
                                headers=JSON,
                            )
                            label = f"1 rec acks={kind}"
                        out.append(
                            f"rep {rep} | {name} {label} | {r.requests_per_s:,.0f} req/s "
                            f"({r.records_per_s:,.0f} rec/s) | p50 {r.p50_ms} | p99 {r.p99_ms} "
                            f"| err {r.errors}"
                        )
                        print(out[-1], flush=True)
                finally:
                    gw.stop()
                rep_probe = json.loads(probe.read_text()) if probe.exists() else {}
                events = rep_probe.pop("events", [])
                out.append(f"rep {rep} | {name} probe | {json.dumps(rep_probe)}")
                for e in events[:12]:
                    out.append(f"      stall {json.dumps(e)[:400]}")
                print("\n".join(out[-13:]), flush=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
