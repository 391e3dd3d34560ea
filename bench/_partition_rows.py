"""Rows of bench/http_wrk.py for topics of several partitions with keyed records (the shape users have).

For 1, 3, 12 and 64 partitions, in one gateway: 1,000 keyed JSON records per request (4 connections; each
request's keys spread over every partition, as Kafka's key partitioner spreads them) and single keyed
records (32 connections; wrk cycles through 256 bodies with different keys). The 12-partition rows are
compared with the 1-partition rows of the same run (issue 27: >= 0.7x).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

PARTITIONS = (1, 3, 12, 64)
JSON = {"Content-Type": "application/json"}
VALUE = "x" * 100


def keyed_body(n: int, first_key: int = 0) -> bytes:
    """``n`` records with keys ``k<first_key>``, ``k<first_key+1>``, ...: distinct keys, every partition."""
    return orjson.dumps({"records": [{"key": f"k{first_key + i}", "value": VALUE} for i in range(n)]})


def rows(
    url: str,
    seconds: float,
    root: Path,
    load: Callable[..., Any],
    counts: tuple[int, ...] = PARTITIONS,
) -> list[Any]:
    """Measure both shapes for each partition count; ``load`` is http_wrk's row maker."""
    out = []
    singles = [keyed_body(1, k) for k in range(256)]
    for n in counts:
        topic = f"keyed{n}"
        httpx.post(f"{url}/v1/topics", json={"name": topic, "partitions": n}, timeout=60).raise_for_status()
        httpx.post(f"{url}/v1/topics/{topic}/records", content=keyed_body(n), headers=JSON, timeout=60)
    for n in counts:
        out.append(
            load(
                f"topiclake 1,000 keyed JSON records, {n} partitions, 4 conn",
                url,
                [f"/v1/topics/keyed{n}/records"],
                keyed_body(1000),
                1000,
                4,
                seconds,
                root,
                headers=JSON,
            )
        )
        out.append(
            load(
                f"topiclake 1 keyed record, {n} partitions, acks=all",
                url,
                [f"/v1/topics/keyed{n}/records"],
                singles[0],
                1,
                32,
                seconds,
                root,
                headers=JSON,
                bodies=singles,
            )
        )
    return out


def ratios(by: dict[str, Any], counts: tuple[int, ...] = PARTITIONS) -> None:
    """Each n-partition row against the 1-partition row of the same shape (target for 12: >= 0.7)."""
    for shape in (
        "topiclake 1,000 keyed JSON records, {n} partitions, 4 conn",
        "topiclake 1 keyed record, {n} partitions, acks=all",
    ):
        base = by.get(shape.format(n=1))
        for n in counts:
            r = by.get(shape.format(n=n))
            if r is None or base is None or n == 1:
                continue
            r.reference = "same shape, 1 partition"
            r.ratio = round(r.requests_per_s / base.requests_per_s, 2) if base.requests_per_s else None
            r.target = ">= 0.7" if n == 12 else ""
