"""Sustained load (issue 8): continuous produce, a consumer group and a plain reader against one gateway.

Run: ``.venv/bin/python bench/sustained.py [--minutes M | --seconds S] [--window-seconds W] [--smoke]
[--out DIR]``

The gateway is ``topiclake serve`` in a subprocess (uvicorn on 127.0.0.1, one worker, default broker
settings, so maintenance is on) over a temporary warehouse. This process runs, on one topic of 4 partitions:
32 producer threads (single-record JSON requests, acks=all, each value carrying a unique id), one member of
a consumer group (native ``/v1`` groups API: join, heartbeat with poll, fetch, commit) and one plain reader
(Arrow fetches from offset 0 of every partition, tailing). Each window reports records/s, produce latency,
Delta commit latency of the topic, active files per partition, ``_delta_log`` files and the gateway's RSS.
At the end producers stop, both consumers catch up, a second reader reads everything again from offset 0,
and every acknowledged record is checked: read exactly once by the readers, at least once by the group,
and exactly once in the Delta table (read with delta-rs).

Writes ``DIR/sustained.json`` and ``DIR/sustained.md`` and prints the Markdown. Targets are printed, never
asserted. See bench/README.md for what each column means and how it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

import _common
from _common import GatewayProcess, percentile
from topiclake.platform import BrokerConfig

TOPIC = "sustained"
GROUP = "sustained-group"
PARTITIONS = 4
PRODUCERS = 32
VALUE_CHARS = 98  # the stored JSON text of a value (with its quotes) is 100 B
ID_CHARS = 12  # "TT-SSSSSSSSS": producer thread, sequence number
ARROW = "application/vnd.apache.arrow.stream"
JSON = "application/json"
POS_SHIFT = 40  # (partition << 40) | offset
KEY_SHIFT = 32  # (thread << 32) | sequence
LOG_ENTRY = re.compile(r"^(\d{20})\.json$")
CONFIG = BrokerConfig()


def value_for(thread: int, seq: int) -> str:
    return f"{thread:02d}-{seq:09d}".ljust(VALUE_CHARS, ".")


def key_of(thread: int, seq: int) -> int:
    return (thread << KEY_SHIFT) | seq


def keys_of_values(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Ids of stored values (JSON text ``"TT-SSSSSSSSS...."``) as int64 keys, vectorised."""
    text = pc.cast(values, pa.string())
    thread = pc.cast(pc.utf8_slice_codeunits(text, 1, 3), pa.int64())
    seq = pc.cast(pc.utf8_slice_codeunits(text, 4, 1 + ID_CHARS), pa.int64())
    return np.asarray(pc.add(pc.shift_left(thread, KEY_SHIFT), seq), dtype=np.int64)


def key_of_text(text: str) -> int:
    """Id of a value fetched with ``encoding=json`` (the JSON string itself)."""
    return key_of(int(text[0:2]), int(text[3:ID_CHARS]))


# ---------------------------------------------------------------------------------------------- gateway


# ---------------------------------------------------------------------------------------------- metrics


def idempotent_get(http: httpx.Client, path: str) -> httpx.Response:
    """GET ``path``, once more on a transport error: a keep-alive connection idle for as long as the
    server's keep-alive timeout (uvicorn's 5 s, a smoke window's length) can be closed by the server just
    as it is reused, and the request then fails with a reset that says nothing about the gateway."""
    try:
        return http.get(path)
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
        return http.get(path)


def scrape(http: httpx.Client) -> dict[str, Any]:
    """The counters this benchmark needs from ``/metrics``: the produce latency histogram (native API,
    acks=all; cumulative bucket counts by upper bound), produced records and Delta commits of the topic."""
    text = idempotent_get(http, "/metrics").text
    buckets: dict[float, float] = {}
    commit_buckets: dict[float, float] = {}
    records = commits = committed = 0.0
    for line in text.splitlines():
        if line.startswith("topiclake_produce_latency_seconds_bucket{") and 'acks="all"' in line:
            if 'api="native"' in line:
                le = line.split('le="', 1)[1].split('"', 1)[0]
                buckets[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("topiclake_produced_records_total{") and f'topic="{TOPIC}"' in line:
            records = float(line.rsplit(" ", 1)[1])
        elif line.startswith("topiclake_topic_commits{") and f'topic="{TOPIC}"' in line:
            commits = float(line.rsplit(" ", 1)[1])
        elif line.startswith("topiclake_topic_commit_latency_seconds_bucket{") and f'topic="{TOPIC}"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            commit_buckets[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("topiclake_topic_committed_records_total{") and f'topic="{TOPIC}"' in line:
            committed = float(line.rsplit(" ", 1)[1])
    return {
        "buckets": buckets,
        "records": records,
        "commits": commits,
        "commit_buckets": commit_buckets,
        "committed_records": committed,
    }


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """Prometheus ``histogram_quantile`` over the delta of two scrapes (linear within a bucket), in ms."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return prev_bound * 1000
            width = count - prev_count
            frac = (rank - prev_count) / width if width > 0 else 1.0
            return (prev_bound + (bound - prev_bound) * frac) * 1000
        prev_bound, prev_count = bound, count
    return None


# ---------------------------------------------------------------------------------------------- load


class Clock:
    """Windows of the run: window i covers [t0 + i*W, t0 + (i+1)*W) (perf_counter seconds)."""

    def __init__(self, window_s: float, windows: int) -> None:
        self.window_s = window_s
        self.windows = windows
        self.t0 = time.perf_counter()
        self.epoch0 = time.time()

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.epoch0 = time.time()

    def window_of(self, t: float) -> int:
        return int((t - self.t0) // self.window_s)

    def window_of_epoch_ms(self, ms: float) -> int:
        return int((ms / 1000 - self.epoch0) // self.window_s)


@dataclass
class ProducerState:
    """What one producer thread saw; ``keys``/``positions`` are its acknowledged records."""

    keys: array = field(default_factory=lambda: array("q"))
    positions: array = field(default_factory=lambda: array("q"))
    refused: array = field(default_factory=lambda: array("q"))  # answered with an error: must not be stored
    uncertain: array = field(default_factory=lambda: array("q"))  # no answer (timeout, connection)
    latencies: dict[int, list[float]] = field(default_factory=dict)  # window -> ms of acked requests
    acked: dict[int, int] = field(default_factory=dict)  # window -> acked records
    errors: dict[int, int] = field(default_factory=dict)
    throttled: dict[int, int] = field(default_factory=dict)
    failure: str | None = None


def producer(url: str, thread: int, clock: Clock, go: threading.Event, stop: threading.Event,
             state: ProducerState) -> None:  # fmt: skip
    partition = thread % PARTITIONS
    path = f"/v1/topics/{TOPIC}/records"
    params = {"acks": "all"}
    headers = {"content-type": JSON}
    seq = 0
    with httpx.Client(base_url=url, timeout=30) as http:
        go.wait()
        while not stop.is_set():
            seq += 1
            key = key_of(thread, seq)
            body = orjson.dumps({"records": [{"value": value_for(thread, seq), "partition": partition}]})
            started = time.perf_counter()
            try:
                resp = http.post(path, content=body, params=params, headers=headers)
            except httpx.HTTPError as exc:
                state.uncertain.append(key)
                w = clock.window_of(time.perf_counter())
                state.errors[w] = state.errors.get(w, 0) + 1
                state.failure = f"{type(exc).__name__}: {exc}"
                time.sleep(0.05)
                continue
            ended = time.perf_counter()
            w = clock.window_of(ended)
            if resp.status_code in (429, 503):
                state.refused.append(key)
                state.throttled[w] = state.throttled.get(w, 0) + 1
                time.sleep(0.01)
                continue
            result = orjson.loads(resp.content)["results"][0] if resp.status_code < 400 else None
            if result is None or result["error"] is not None or result["offset"] is None:
                state.refused.append(key)
                state.errors[w] = state.errors.get(w, 0) + 1
                state.failure = f"HTTP {resp.status_code}: {resp.text[:200]}"
                time.sleep(0.05)
                continue
            state.keys.append(key)
            state.positions.append((int(result["partition"]) << POS_SHIFT) | int(result["offset"]))
            state.latencies.setdefault(w, []).append((ended - started) * 1000)
            state.acked[w] = state.acked.get(w, 0) + 1


@dataclass
class ReaderState:
    """What a reader read: keys and (partition, offset) positions in reading order."""

    name: str
    positions_by_partition: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    keys: list[np.ndarray] = field(default_factory=list)
    positions: list[np.ndarray] = field(default_factory=list)
    records: int = 0
    gaps: int = 0  # answers whose offsets were not exactly [offset, next_offset)
    requests: int = 0
    errors: int = 0
    failure: str | None = None
    done: bool = False


def caught_up(positions: list[int] | dict[int, int], targets: list[int] | None) -> bool:
    return targets is not None and all(positions[p] >= targets[p] for p in range(PARTITIONS))


def reader(url: str, state: ReaderState, targets: list[list[int] | None], abort: threading.Event,
           max_records: int) -> None:  # fmt: skip
    """Plain fetch loop over every partition from offset 0 (Arrow answers), until it has read up to
    ``targets[0]`` (set once the producers have stopped) or ``abort``."""
    params: dict[str, Any] = {"max_records": max_records, "max_bytes": 64 * 1024 * 1024}
    with httpx.Client(base_url=url, timeout=60, headers={"accept": ARROW}) as http:
        while not abort.is_set():
            got = 0
            for p in range(PARTITIONS):
                offset = state.positions_by_partition[p]
                try:
                    resp = http.get(
                        f"/v1/topics/{TOPIC}/partitions/{p}/records", params={**params, "offset": offset}
                    )
                    state.requests += 1
                    if resp.status_code >= 400:
                        raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
                except (httpx.HTTPError, RuntimeError) as exc:
                    state.errors += 1
                    state.failure = str(exc)
                    time.sleep(0.1)
                    continue
                next_offset = int(resp.headers["x-topiclake-next-offset"])
                n = 0
                if resp.content:
                    table = pa.ipc.open_stream(resp.content).read_all()
                    n = table.num_rows
                    if n:
                        offsets = np.asarray(table["offset"].to_numpy(), dtype=np.int64)
                        expected = np.arange(offset, offset + n, dtype=np.int64)
                        if next_offset != offset + n or not np.array_equal(offsets, expected):
                            state.gaps += 1
                        state.keys.append(keys_of_values(table["value"]))
                        state.positions.append((np.int64(p) << POS_SHIFT) | offsets)
                elif next_offset != offset:
                    state.gaps += 1
                state.records += n
                state.positions_by_partition[p] = next_offset
                got += n
            if got == 0:
                if caught_up(state.positions_by_partition, targets[0]):
                    break
                time.sleep(0.05)
    state.done = True


@dataclass
class GroupState:
    """What the group member read and did."""

    keys: array = field(default_factory=lambda: array("q"))
    positions: dict[int, int] = field(default_factory=dict)  # partition -> next offset
    committed: dict[int, int] = field(default_factory=dict)
    assignment: list[int] = field(default_factory=list)
    records: int = 0
    joins: int = 0
    heartbeats: int = 0
    commits: int = 0
    commit_ms: list[float] = field(default_factory=list)
    errors: int = 0
    failure: str | None = None
    done: bool = False


def group_member(url: str, state: GroupState, targets: list[list[int] | None], abort: threading.Event,
                 max_records: int) -> None:  # fmt: skip
    """One member of a consumer group: join, fetch its partitions (JSON), commit every second, heartbeat
    (with poll) every second; rejoins (from the committed offsets) whenever the coordinator says so."""
    base = f"/v1/groups/{GROUP}"
    member: str | None = None
    generation = -1

    def join(http: httpx.Client) -> None:
        nonlocal member, generation
        body: dict[str, Any] = {"topics": [TOPIC], "client_id": "sustained", "session_timeout_ms": 30_000}
        if member:
            body["member_id"] = member
        resp = http.post(f"{base}/members", json=body)
        resp.raise_for_status()
        doc = resp.json()
        member, generation = doc["member_id"], doc["generation_id"]
        adopt(http, [a["partition"] for a in doc["assignment"] if a["topic"] == TOPIC])
        state.joins += 1

    def adopt(http: httpx.Client, partitions: list[int]) -> None:
        resp = http.get(f"{base}/offsets", params={"topic": TOPIC})
        resp.raise_for_status()
        committed = {o["partition"]: o["offset"] for o in resp.json()["offsets"]}
        state.assignment = sorted(partitions)
        state.positions = {p: committed.get(p, 0) for p in state.assignment}
        state.committed = dict(state.positions)

    def commit(http: httpx.Client) -> None:
        todo = {p: o for p, o in state.positions.items() if state.committed.get(p) != o}
        if not todo:
            return
        offsets = [{"topic": TOPIC, "partition": p, "offset": o} for p, o in todo.items()]
        started = time.perf_counter()
        body = {"member_id": member, "generation_id": generation, "offsets": offsets}
        resp = http.post(f"{base}/offsets", json=body)
        resp.raise_for_status()
        state.commit_ms.append((time.perf_counter() - started) * 1000)
        state.commits += 1
        state.committed.update(todo)

    def heartbeat(http: httpx.Client) -> None:
        resp = http.post(
            f"{base}/members/{member}/heartbeat", json={"generation_id": generation, "poll": True}
        )
        resp.raise_for_status()
        state.heartbeats += 1
        doc = resp.json()
        assigned = sorted(a["partition"] for a in doc["assignment"] if a["topic"] == TOPIC)
        if doc["rebalance_in_progress"] or doc["generation_id"] != generation or assigned != state.assignment:
            join(http)

    with httpx.Client(base_url=url, timeout=60) as http:
        last_hb = last_commit = time.perf_counter()
        joined = False
        while not abort.is_set():
            try:
                if not joined:
                    join(http)
                    joined = True
                got = 0
                for p in list(state.assignment):
                    offset = state.positions[p]
                    resp = http.get(
                        f"/v1/topics/{TOPIC}/partitions/{p}/records",
                        params={"offset": offset, "max_records": max_records, "encoding": "json"},
                    )
                    resp.raise_for_status()
                    doc = orjson.loads(resp.content)
                    state.keys.extend(key_of_text(r["value"]) for r in doc["records"])
                    state.positions[p] = int(doc["next_offset"])
                    got += len(doc["records"])
                state.records += got
                now = time.perf_counter()
                if now - last_commit >= 1.0 or (got == 0 and state.positions != state.committed):
                    commit(http)
                    last_commit = now
                if now - last_hb >= 1.0:
                    heartbeat(http)
                    last_hb = now
                if got == 0:
                    if len(state.assignment) == PARTITIONS and caught_up(state.committed, targets[0]):
                        break
                    time.sleep(0.05)
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                state.errors += 1
                state.failure = f"{type(exc).__name__}: {exc}"
                joined = False  # rejoin and restart from the committed offsets (at least once)
                time.sleep(0.2)
        if member:
            with contextlib.suppress(httpx.HTTPError):
                http.delete(f"{base}/members/{member}")
    state.done = True


@dataclass
class LogState:
    """Commits of the topic table, read from its ``_delta_log`` entries (before log cleanup removes them)."""

    last_version: int = -1
    commit_ms: dict[int, list[float]] = field(default_factory=dict)  # window -> execution_time_ms
    commit_rows: dict[int, int] = field(default_factory=dict)
    commits: dict[int, int] = field(default_factory=dict)
    compactions: dict[int, int] = field(default_factory=dict)
    other: int = 0
    missed: int = 0  # versions cleaned up before this watcher read them
    failure: str | None = None


def log_watcher(log_dir: Path, clock: Clock, state: LogState, stop: threading.Event) -> None:
    """Every 0.2 s, reads the commitInfo of each new ``_delta_log`` entry: the broker's appends carry
    ``topiclake.commit`` and delta-rs's ``operationMetrics.execution_time_ms`` (the time of the whole
    ``write_deltalake`` call: Parquet file and log entry), compactions ``topiclake.operation``."""
    while not stop.wait(0.2):
        try:
            versions = sorted(int(m.group(1)) for name in os.listdir(log_dir) if (m := LOG_ENTRY.match(name)))
        except OSError as exc:
            state.failure = str(exc)
            continue
        for v in versions:
            if v <= state.last_version:
                continue
            if state.last_version >= 0:
                state.missed += v - state.last_version - 1
            state.last_version = v
            try:
                with (log_dir / f"{v:020d}.json").open("rb") as f:
                    lines = f.read().splitlines()
            except OSError:
                state.missed += 1
                continue
            info = next(
                (orjson.loads(x)["commitInfo"] for x in lines if x.startswith(b'{"commitInfo"')), None
            )
            if info is None:
                state.other += 1
                continue
            w = clock.window_of_epoch_ms(info.get("timestamp", 0))
            metrics = info.get("operationMetrics") or {}
            if "topiclake.commit" in info:
                state.commits[w] = state.commits.get(w, 0) + 1
                # delta-rs's name, or the local append path's (Spark's)
                rows = metrics.get("num_added_rows", metrics.get("numOutputRows", 0))
                state.commit_rows[w] = state.commit_rows.get(w, 0) + int(rows)
                if "execution_time_ms" in metrics:
                    state.commit_ms.setdefault(w, []).append(float(metrics["execution_time_ms"]))
            elif info.get("topiclake.operation") == "compaction":
                state.compactions[w] = state.compactions.get(w, 0) + 1
            else:
                state.other += 1


# ---------------------------------------------------------------------------------------------- table


def tier(records: int, base: int) -> int:
    """maintenance.py's tier of a file: floor(log_base(records))."""
    t = 0
    while records >= base:
        records //= base
        t += 1
    return t


def file_bound(records_in_segment: int, n: int = CONFIG.compact_min_files) -> int:
    """The documented bound on the active files of one (partition, segment) of ``records`` records
    (maintenance.py): N - 1 files per tier, tiers 0..floor(log_N(records)), plus N files committed
    during one maintenance round."""
    tiers = tier(max(records_in_segment, 1), n) + 1
    return (n - 1) * tiers + n


@dataclass
class TableSample:
    files: dict[int, int]  # partition -> active files
    bounds: dict[int, int]  # partition -> bound (sum over its segments)
    log_files: int
    rss_mb: float | None


def sample_table(uri: str, log_dir: Path, gateway: GatewayProcess) -> TableSample:
    files: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
    bounds: dict[int, int] = {p: file_bound(0) for p in range(PARTITIONS)}
    adds = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    if adds.num_rows:
        rows = adds.group_by(["partition.partition", "partition.segment"]).aggregate(
            [("num_records", "sum"), ("num_records", "count")]
        )
        for b in bounds:
            bounds[b] = 0
        for p, records, count in zip(
            rows["partition.partition"].to_pylist(),
            rows["num_records_sum"].to_pylist(),
            rows["num_records_count"].to_pylist(),
            strict=True,
        ):
            files[int(p)] = files.get(int(p), 0) + int(count)
            bounds[int(p)] = bounds.get(int(p), 0) + file_bound(int(records or 0))
        for p in range(PARTITIONS):
            bounds[p] = bounds[p] or file_bound(0)
    log_files = sum(1 for _ in os.scandir(log_dir))
    return TableSample(files, bounds, log_files, gateway.rss_mb())


# ---------------------------------------------------------------------------------------------- report


@dataclass
class Window:
    window: int
    start_s: float
    end_s: float
    records: int
    records_per_s: float
    produce_p50_ms: float | None
    produce_p99_ms: float | None
    gateway_produce_p50_ms: float | None
    gateway_produce_p99_ms: float | None
    produce_errors: int
    throttled: int
    commits: int
    commits_per_s: float
    records_per_commit: float | None
    commit_p50_ms: float | None
    commit_p99_ms: float | None
    log_commit_p99_ms: float | None
    gateway_commits: int
    gateway_records_per_commit: float | None
    compactions: int
    active_files_max: int
    active_files_end: list[int]
    active_files_bound: int
    within_bound: bool
    delta_log_files_max: int
    delta_log_files_end: int
    rss_mb_max: float | None
    rss_mb_end: float | None
    reader_lag: int
    group_lag: int


@dataclass
class Verdict:
    target: str
    first: float | None
    last: float | None
    limit: str
    met: bool | None
    note: str = ""


def ratio_verdict(name: str, first: float | None, last: float | None, limit: float) -> Verdict:
    met = None if first is None or last is None or first <= 0 else last <= limit * first
    return Verdict(name, first, last, f"last ≤ {limit}x first", met)


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def verify(
    producers: list[ProducerState],
    readers: list[ReaderState],
    group: GroupState,
    uri: str,
) -> dict[str, Any]:
    """Every acknowledged record read back: exactly once by each reader (at the acknowledged position),
    at least once by the group, exactly once in the Delta table."""
    acked_keys = np.concatenate([np.frombuffer(s.keys, dtype=np.int64) for s in producers] or [np.empty(0)])
    acked_pos = np.concatenate([np.frombuffer(s.positions, dtype=np.int64) for s in producers])
    refused = np.concatenate([np.frombuffer(s.refused, dtype=np.int64) for s in producers])
    uncertain = np.concatenate([np.frombuffer(s.uncertain, dtype=np.int64) for s in producers])
    order = np.argsort(acked_keys)
    acked_keys, acked_pos = acked_keys[order], acked_pos[order]
    out: dict[str, Any] = {
        "acked": int(acked_keys.size),
        "refused": int(refused.size),
        "uncertain": int(uncertain.size),
        "acked_position_collisions": int(acked_pos.size - np.unique(acked_pos).size),
    }

    def check(keys: np.ndarray, positions: np.ndarray | None) -> dict[str, Any]:
        uniq, counts = np.unique(keys, return_counts=True)
        present = np.isin(acked_keys, uniq)
        dup = np.isin(acked_keys, uniq[counts > 1])
        res: dict[str, Any] = {
            "read": int(keys.size),
            "acked_missing": int((~present).sum()),
            "acked_duplicated": int(dup.sum()),
            "duplicate_reads": int((counts - 1).sum()),
            "refused_present": int(np.isin(refused, uniq).sum()),
            "uncertain_present": int(np.isin(uncertain, uniq).sum()),
            "unknown": int((~np.isin(uniq, np.concatenate([acked_keys, refused, uncertain]))).sum()),
        }
        if positions is not None:
            idx = np.searchsorted(acked_keys, keys)
            idx = np.minimum(idx, max(acked_keys.size - 1, 0))
            is_acked = acked_keys.size > 0 and (acked_keys[idx] == keys)
            res["wrong_position"] = int(np.sum(is_acked & (acked_pos[idx] != positions)))
        return res

    for r in readers:
        keys = np.concatenate(r.keys) if r.keys else np.empty(0, np.int64)
        pos = np.concatenate(r.positions) if r.positions else np.empty(0, np.int64)
        res = check(keys, pos)
        res["offset_gaps"] = r.gaps
        res["exactly_once"] = (
            res["acked_missing"] == 0
            and res["duplicate_reads"] == 0
            and res["wrong_position"] == 0
            and r.gaps == 0
            and res["unknown"] == 0
            and res["refused_present"] == 0
        )
        out[r.name] = res
    res = check(np.frombuffer(group.keys, dtype=np.int64), None)
    res["at_least_once"] = res["acked_missing"] == 0 and res["unknown"] == 0
    out["group"] = res
    table = DeltaTable(uri).to_pyarrow_table(columns=["partition", "offset", "value"])
    tpos = (np.asarray(table["partition"].to_numpy(), dtype=np.int64) << POS_SHIFT) | np.asarray(
        table["offset"].to_numpy(), dtype=np.int64
    )
    res = check(keys_of_values(table["value"]), tpos)
    res["offset_duplicates"] = int(tpos.size - np.unique(tpos).size)
    res["exactly_once"] = (
        res["acked_missing"] == 0
        and res["duplicate_reads"] == 0
        and res["wrong_position"] == 0
        and res["offset_duplicates"] == 0
        and res["unknown"] == 0
        and res["refused_present"] == 0
    )
    out["table"] = res
    out["exactly_once"] = bool(
        out["acked"] > 0
        and out["acked_position_collisions"] == 0
        and all(out[r.name]["exactly_once"] for r in readers)
        and out["table"]["exactly_once"]
        and out["group"]["at_least_once"]
    )
    return out


def verdicts(windows: list[Window], check: dict[str, Any]) -> list[Verdict]:
    first, last = windows[0], windows[-1]
    out = [
        ratio_verdict("produce p99 ms (client)", first.produce_p99_ms, last.produce_p99_ms, 2),
        ratio_verdict(
            "produce p99 ms (gateway histogram)", first.gateway_produce_p99_ms, last.gateway_produce_p99_ms, 2
        ),
        ratio_verdict("commit p99 ms (gateway histogram)", first.commit_p99_ms, last.commit_p99_ms, 2),
    ]
    worst = max(windows, key=lambda w: w.active_files_max - w.active_files_bound)
    out.append(
        Verdict(
            "active files per partition (max of the window's samples)",
            first.active_files_max,
            last.active_files_max,
            "< bound in every sample",
            all(w.within_bound for w in windows),
            f"closest: window {worst.window}, {worst.active_files_max} files, "
            f"bound {worst.active_files_bound}; "
            f"bound = (compact_min_files - 1) * tiers + compact_min_files, N = {CONFIG.compact_min_files}",
        )
    )
    v = ratio_verdict("gateway RSS MiB (end of window)", first.rss_mb_end, last.rss_mb_end, 1.5)
    v.note = "first window = warm-up"
    out.append(v)
    out.append(
        Verdict(
            "every acknowledged record read back exactly once",
            None,
            float(check["acked"]),
            "reader + catch-up reader + table exactly once, group at least once",
            bool(check["exactly_once"]),
            f"group duplicates: {check['group']['duplicate_reads']}",
        )
    )
    out.append(
        Verdict("records/s (information)", first.records_per_s, last.records_per_s, "", None, "not a target")
    )
    return out


def machine(args: argparse.Namespace, seconds: float) -> dict[str, str]:
    return _common.machine(
        gateway="topiclake serve, 1 uvicorn worker, default broker settings (maintenance on)",
        load=f"{PRODUCERS} producer threads (1 record/request, acks=all, 100 B), 1 group member, "
        f"1 reader, {PARTITIONS} partitions, {seconds:g} s in windows of {args.window_seconds:g} s",
        broker=f"linger_ms={CONFIG.linger_ms}, checkpoint_interval={CONFIG.checkpoint_interval}, "
        f"log_retention_ms={CONFIG.log_retention_ms}, compact_min_files={CONFIG.compact_min_files}, "
        f"maintenance_interval_ms={CONFIG.maintenance_interval_ms}",
    )


def markdown(report: dict[str, Any]) -> str:
    def num(x: float | None, digits: int = 1) -> str:
        return "" if x is None else f"{x:,.{digits}f}"

    lines = [
        "# Sustained load",
        "",
        ", ".join(f"{k}: {v}" for k, v in report["machine"].items()),
        "",
        "produce ms: client-side latency of acknowledged requests (p50/p99); gw ms: the gateway's "
        "`topiclake_produce_latency_seconds` histogram over the window (interpolated within buckets). "
        "commit ms: the gateway's `topiclake_topic_commit_latency_seconds` histogram over the window (the "
        "group commit, either path: local append or delta-rs); rec/commit: records per commit from "
        "`_delta_log`. "
        "files: active files per partition (max over the window's samples; at the window's end per "
        "partition) and the documented bound. Lags in records at the window's end.",
        "",
        "| window | end s | records/s | produce p50 ms | produce p99 ms | gw p50 ms | gw p99 ms | errors "
        "| commits/s | rec/commit | commit p50 ms | commit p99 ms | compactions | files max | files end "
        "| bound | _delta_log | RSS MiB | reader lag | group lag |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for w in report["windows"]:
        errors = f"{w['produce_errors']:,}" + (f" (+{w['throttled']:,} thr.)" if w["throttled"] else "")
        lines.append(
            f"| {w['window']} | {w['end_s']:.0f} | {num(w['records_per_s'], 0)} | {num(w['produce_p50_ms'])} "
            f"| {num(w['produce_p99_ms'])} | {num(w['gateway_produce_p50_ms'])} "
            f"| {num(w['gateway_produce_p99_ms'])} | {errors} | {num(w['commits_per_s'])} "
            f"| {num(w['records_per_commit'])} | {num(w['commit_p50_ms'])} | {num(w['commit_p99_ms'])} "
            f"| {w['compactions']} | {w['active_files_max']} | {'/'.join(map(str, w['active_files_end']))} "
            f"| {w['active_files_bound']} | {w['delta_log_files_max']} | {num(w['rss_mb_end'])} "
            f"| {w['reader_lag']:,} | {w['group_lag']:,} |"
        )
    lines += ["", "| target | first | last | limit | met | note |", "|---|---:|---:|---|---|---|"]
    for v in report["verdicts"]:
        met = "" if v["met"] is None else ("yes" if v["met"] else "**no**")
        lines.append(
            f"| {v['target']} | {num(v['first'])} | {num(v['last'])} | {v['limit']} | {met} | {v['note']} |"
        )
    c = report["check"]
    lines += [
        "",
        f"Acknowledged: {c['acked']:,}; refused (error answer, must not be stored): {c['refused']:,}; "
        f"uncertain (no answer): {c['uncertain']:,}.",
        "",
        "| read by | read | acked missing | duplicate reads | wrong position | offset gaps | exactly once |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name in ("reader", "catchup_reader", "table", "group"):
        r = c[name]
        once = r.get("exactly_once", r.get("at_least_once"))
        label = name + (" (at least once)" if name == "group" else "")
        lines.append(
            f"| {label} | {r['read']:,} | {r['acked_missing']:,} | {r['duplicate_reads']:,} "
            f"| {r.get('wrong_position', '')} | {r.get('offset_gaps', r.get('offset_duplicates', ''))} "
            f"| {'yes' if once else '**no**'} |"
        )
    e = report["end"]
    lines += [
        "",
        f"End: producers stopped at {e['produce_seconds']:.1f} s; reader caught up in "
        f"{num(e['reader_catchup_s'], 2)} s, group in {num(e['group_catchup_s'], 2)} s; catch-up reader "
        f"read everything from offset 0 in {num(e['catchup_reader_s'], 2)} s; "
        f"_delta_log commits missed by the watcher: {e['log_versions_missed']}; "
        f"gateway log warnings: {e['gateway_warnings']}.",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- run


def gateway_warnings(log: Path) -> Counter[str]:
    """Warning and error lines of the gateway's log, counted by message with numbers blanked out."""
    kinds: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"\b(?:WARNING|ERROR|CRITICAL)\b.*", line)
        if m:
            kinds[re.sub(r"\d+", "N", m.group(0))[:160]] += 1
    return kinds


def end_offsets(http: httpx.Client) -> list[int]:
    resp = http.get(f"/v1/topics/{TOPIC}")
    resp.raise_for_status()
    ends = {o["partition"]: o["end_offset"] for o in resp.json()["offsets"]}
    return [int(ends[p]) for p in range(PARTITIONS)]


def wait_until(pred: Any, timeout_s: float) -> float | None:
    """Seconds until ``pred()`` held, or None after ``timeout_s``."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if pred():
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


def run(args: argparse.Namespace, seconds: float, root: Path, progress: Any) -> dict[str, Any]:
    window_s = args.window_seconds
    windows = max(1, math.ceil(seconds / window_s - 1e-9))
    gateway = GatewayProcess(root / "warehouse", root / "gateway.log")
    stop = threading.Event()
    abort = threading.Event()
    threads: list[threading.Thread] = []
    try:
        http = httpx.Client(base_url=gateway.url, timeout=60)
        http.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}).raise_for_status()
        uri = str(root / "warehouse" / "topics" / TOPIC)
        log_dir = Path(uri) / "_delta_log"
        clock = Clock(window_s, windows)
        go = threading.Event()
        targets: list[list[int] | None] = [None]
        producers = [ProducerState() for _ in range(PRODUCERS)]
        tail = ReaderState("reader")
        group = GroupState()
        logs = LogState()
        for i, st in enumerate(producers):
            threads.append(threading.Thread(target=producer, args=(gateway.url, i, clock, go, stop, st)))
        threads.append(threading.Thread(target=reader, args=(gateway.url, tail, targets, abort, 5000)))
        threads.append(threading.Thread(target=group_member, args=(gateway.url, group, targets, abort, 2000)))
        watcher = threading.Thread(target=log_watcher, args=(log_dir, clock, logs, abort))
        for t in threads:
            t.daemon = True
            t.start()
        watcher.daemon = True
        watcher.start()
        clock.start()
        go.set()
        progress(f"gateway pid {gateway.proc.pid} on {gateway.url}; producing for {seconds:g} s")
        before = scrape(http)
        sample_every = min(5.0, window_s / 4)
        results: list[Window] = []
        for w in range(windows):
            w_end = clock.t0 + min((w + 1) * window_s, seconds)
            samples: list[TableSample] = []
            while True:
                samples.append(sample_table(uri, log_dir, gateway))
                left = w_end - time.perf_counter()
                if left <= 0:
                    break
                time.sleep(min(sample_every, left))
            after = scrape(http)
            if w == windows - 1:
                stop.set()
            time.sleep(0.3)  # let the requests of this window finish and their commits be read
            start_s, end_s = w * window_s, min((w + 1) * window_s, seconds)
            span = end_s - start_s
            lats = [x for s in producers for x in s.latencies.get(w, [])]
            acked = sum(s.acked.get(w, 0) for s in producers)
            commit_ms = logs.commit_ms.get(w, [])
            gateway_commits = int(after["commits"] - before["commits"])
            commits = logs.commits.get(w, 0)
            last = samples[-1]
            highs = {
                o["partition"]: o["end_offset"]
                for o in idempotent_get(http, f"/v1/topics/{TOPIC}").json()["offsets"]
            }
            results.append(
                Window(
                    window=w + 1,
                    start_s=start_s,
                    end_s=end_s,
                    records=acked,
                    records_per_s=round(acked / span, 1),
                    produce_p50_ms=r3(percentile(lats, 50)),
                    produce_p99_ms=r3(percentile(lats, 99)),
                    gateway_produce_p50_ms=r3(histogram_quantile(0.5, before["buckets"], after["buckets"])),
                    gateway_produce_p99_ms=r3(histogram_quantile(0.99, before["buckets"], after["buckets"])),
                    produce_errors=sum(s.errors.get(w, 0) for s in producers),
                    throttled=sum(s.throttled.get(w, 0) for s in producers),
                    commits=commits,
                    commits_per_s=round(commits / span, 2),
                    records_per_commit=round(logs.commit_rows.get(w, 0) / commits, 2) if commits else None,
                    commit_p50_ms=r3(
                        histogram_quantile(0.5, before["commit_buckets"], after["commit_buckets"])
                    ),
                    commit_p99_ms=r3(
                        histogram_quantile(0.99, before["commit_buckets"], after["commit_buckets"])
                    ),
                    log_commit_p99_ms=percentile(commit_ms, 99),
                    gateway_commits=gateway_commits,
                    gateway_records_per_commit=round(
                        (after["committed_records"] - before["committed_records"]) / gateway_commits, 2
                    )
                    if gateway_commits
                    else None,
                    compactions=logs.compactions.get(w, 0),
                    active_files_max=max(max(s.files.values()) for s in samples),
                    active_files_end=[last.files.get(p, 0) for p in range(PARTITIONS)],
                    active_files_bound=min(last.bounds.values()),
                    within_bound=all(s.files[p] < s.bounds[p] for s in samples for p in s.files),
                    delta_log_files_max=max(s.log_files for s in samples),
                    delta_log_files_end=last.log_files,
                    rss_mb_max=r3(max((s.rss_mb or 0.0) for s in samples)),
                    rss_mb_end=r3(last.rss_mb),
                    reader_lag=sum(highs[p] - tail.positions_by_partition[p] for p in range(PARTITIONS)),
                    group_lag=sum(highs[p] - group.positions.get(p, 0) for p in range(PARTITIONS)),
                )
            )
            before = after
            x = results[-1]
            progress(
                f"window {x.window}/{windows}: {x.records_per_s:,.0f} rec/s, produce p99 "
                f"{x.produce_p99_ms} ms, commit p99 {x.commit_p99_ms} ms, files max {x.active_files_max} "
                f"(bound {x.active_files_bound}), _delta_log {x.delta_log_files_max}, RSS {x.rss_mb_end} MiB"
            )
        produce_seconds = time.perf_counter() - clock.t0
        for t in threads[:PRODUCERS]:
            t.join(60)
        targets[0] = end_offsets(http)
        progress(f"producers stopped; end offsets {targets[0]}")
        catchup_timeout = 30.0 if args.smoke else 180.0
        reader_s = wait_until(lambda: tail.done, catchup_timeout)
        group_s = wait_until(lambda: group.done, catchup_timeout)
        abort.set()
        for t in threads[PRODUCERS:]:
            t.join(30)
        watcher.join(10)
        started = time.perf_counter()
        catchup = ReaderState("catchup_reader")
        again = threading.Event()
        reader_thread = threading.Thread(
            target=reader, args=(gateway.url, catchup, targets, again, 20_000), daemon=True
        )
        reader_thread.start()
        reader_thread.join(catchup_timeout)
        again.set()
        catchup_s = time.perf_counter() - started if catchup.done else None
        progress(f"consumers caught up (reader {reader_s} s, group {group_s} s, catch-up {catchup_s} s)")
        http.close()
    finally:
        stop.set()
        abort.set()
        gateway.stop()
    check = verify(producers, [tail, catchup], group, uri)
    warnings = gateway_warnings(gateway.log)
    report: dict[str, Any] = {
        "machine": machine(args, seconds),
        "config": {
            "seconds": seconds,
            "window_seconds": window_s,
            "producers": PRODUCERS,
            "partitions": PARTITIONS,
            "value_bytes": VALUE_CHARS + 2,
            "compact_min_files": CONFIG.compact_min_files,
            "checkpoint_interval": CONFIG.checkpoint_interval,
            "log_retention_ms": CONFIG.log_retention_ms,
        },
        "windows": [asdict(w) for w in results],
        "check": check,
        "end": {
            "produce_seconds": round(produce_seconds, 3),
            "end_offsets": targets[0],
            "reader_catchup_s": r3(reader_s),
            "group_catchup_s": r3(group_s),
            "catchup_reader_s": r3(catchup_s),
            "log_versions_missed": logs.missed,
            "gateway_warnings": sum(warnings.values()),
            "gateway_warning_kinds": dict(warnings.most_common(10)),
            "group": {
                "joins": group.joins,
                "heartbeats": group.heartbeats,
                "commits": group.commits,
                "commit_p50_ms": r3(percentile(group.commit_ms, 50)),
                "commit_p99_ms": r3(percentile(group.commit_ms, 99)),
                "errors": group.errors,
                "last_error": group.failure,
            },
            "reader_errors": {"reader": tail.errors, "catchup_reader": catchup.errors},
            "producer_last_error": next((s.failure for s in producers if s.failure), None),
            "log_watcher_error": logs.failure,
        },
    }
    report["verdicts"] = [asdict(v) for v in verdicts(results, check)]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to produce (default 10)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="how long to produce, overrides --minutes"
    )
    parser.add_argument("--window-seconds", type=float, default=60.0, help="report window (default 60)")
    parser.add_argument("--smoke", action="store_true", help="~20 s in all: 15 s of produce, 5 s windows")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")), help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.smoke:
        seconds = args.seconds or 15.0
        args.window_seconds = 5.0 if args.window_seconds == 60.0 else args.window_seconds
    else:
        seconds = args.seconds if args.seconds is not None else args.minutes * 60
    started = time.perf_counter()

    def progress(what: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:7.1f} s] {what}", file=sys.stderr, flush=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="topiclake-sustained-") as tmp:
        report = run(args, seconds, Path(tmp), progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sustained.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (out / "sustained.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
