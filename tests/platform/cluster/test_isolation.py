"""A broker cut off from the warehouse stops acknowledging, and its partitions move to brokers that can
still write.

The broker runs in its own mount namespace (``unshare -m``) with the warehouse bind-mounted; the test
remounts that bind read-only from inside the namespace (``nsenter``): every write of that broker then
fails with EROFS while the other brokers write on, a real storage failure of one broker only.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from cluster_procs import Cluster, until
from deltalake import DeltaTable

from topiclake.process.ports import free_port

pytestmark = pytest.mark.slow


LAST: list[str] = []


def produce(url: str, partition: int, value: str) -> dict[str, object] | None:
    """One acks=all record; its result if acknowledged, else None (the answer kept in LAST)."""
    try:
        r = httpx.post(
            f"{url}/v1/topics/iso/records",
            params={"partition": partition},
            json={"records": [{"value": value}]},
            timeout=40,
        )
    except httpx.HTTPError as exc:
        LAST.append(repr(exc))
        return None
    LAST.append(r.text[:500])
    if r.status_code != 200:
        return None
    res: dict[str, object] = r.json()["results"][0]
    return res if res["error"] is None else None


def test_a_broker_that_cannot_write_stops_acknowledging_and_loses_its_partitions(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    wh.mkdir()
    cluster = Cluster(wh, tmp_path)
    try:
        cluster.start(1)
        cluster.start(2)
        port = free_port()
        serve = [sys.executable, "-m", "topiclake.cli", "serve", "--warehouse", str(wh)]
        inner = (
            f"mount --bind {wh} {wh} && exec {shlex.join([*serve, '--port', str(port), '--broker-id', '3'])}"
        )
        cluster.prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", inner]
        # the prefix carries the whole command: start() appends its own args, which sh ignores ($0, $1...)
        cut = cluster.start(3, port=port)
        cluster.prefix = []
        until(lambda: len(cluster.metadata(1)["brokers"]) == 3, what="3 brokers")
        r = httpx.post(
            f"{cluster.brokers[1].url}/v1/topics", json={"name": "iso", "partitions": 3}, timeout=30
        )
        assert r.status_code == 201, r.text
        until(lambda: len(cluster.leaders("iso", 3)) == 3, what="leaders")
        part = next(p for p, b in cluster.leaders("iso", 1).items() if b == 3)
        acked = []
        first = produce(cut.url, part, "before")
        assert first is not None
        acked.append(("before", first))

        # cut broker 3 off: its view of the warehouse turns read-only
        subprocess.run(
            ["nsenter", "-t", str(cut.proc.pid), "-m", "mount", "-o", "remount,ro,bind", str(wh)], check=True
        )
        cut_at = time.monotonic()
        refused = [f"cut-{i}" for i in range(3)]
        for value in refused:
            res = produce(cut.url, part, value)
            # broker 3 cannot commit: it must not acknowledge, unless it already handed the partition on
            if res is not None:
                acked.append((value, res))
                assert cluster.leaders("iso", 1)[part] != 3, "acknowledged by a broker that cannot write"
        until(lambda: cluster.leaders("iso", 1)[part] != 3, 30, "partition moved off the cut broker")
        moved_after = time.monotonic() - cut_at
        res = produce(cluster.brokers[1].url, part, "after")
        assert res is not None
        acked.append(("after", res))

        # reconnect: it heartbeats again and takes its preferred partition back
        subprocess.run(
            ["nsenter", "-t", str(cut.proc.pid), "-m", "mount", "-o", "remount,rw,bind", str(wh)], check=True
        )
        until(lambda: cluster.leaders("iso", 1)[part] == 3, 30, "preferred leader back")
        res = produce(cut.url, part, "back")
        assert res is not None, LAST[-1]
        acked.append(("back", res))

        rows = DeltaTable(str(wh / "topics" / "iso")).to_pyarrow_table().to_pylist()
        mine = {orjson.loads(r["value"]): (r["partition"], r["offset"]) for r in rows}
        assert len(mine) == len(rows), "a value was written twice"
        for value, res in acked:
            assert mine[value] == (res["partition"], res["offset"])
        offsets = sorted(r["offset"] for r in rows if r["partition"] == part)
        assert offsets == list(range(len(offsets)))
        assert moved_after < 30
    finally:
        cluster.stop_all()
