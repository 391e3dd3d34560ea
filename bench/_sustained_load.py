"""The sustained benchmark's load (bench/sustained.py): producers, the plain reader, the group member.

The 32 producer threads send single-record JSON requests (acks=all) whose values carry a unique id; the
reader tails every partition from offset 0 with Arrow fetches and checks the offsets of each answer; the
group member joins, fetches, commits and heartbeats over the native ``/v1`` groups API. Each thread writes
what it saw into its own state object, read by the driver and by ``_sustained_report.verify``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

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


def idempotent_get(http: httpx.Client, path: str) -> httpx.Response:
    """GET ``path``, once more on a transport error: a keep-alive connection idle for as long as the
    server's keep-alive timeout (uvicorn's 5 s, a smoke window's length) can be closed by the server just
    as it is reused, and the request then fails with a reset that says nothing about the gateway."""
    try:
        return http.get(path)
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
        return http.get(path)


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
