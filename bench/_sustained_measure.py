"""What the sustained benchmark (bench/sustained.py) measures besides its load: the gateway's ``/metrics``,
the topic table's commits (its ``_delta_log``) and active files, on a local disk or on S3.

On S3 the benchmark starts the project's local S3 API server and its counting proxy
(:class:`S3Stack`); the gateway reaches the bucket through the proxy, this process's own reads (samples of
the table, the log watcher, the final check) go to the server directly, so the proxy counts only the
gateway's requests.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from _common import GatewayProcess
from _sustained_load import CONFIG, PARTITIONS, TOPIC, Clock, idempotent_get
from topiclake.objectstore import LocalS3Server, ProxyProcess
from topiclake.platform import Storage

LOG_ENTRY = re.compile(r"^(\d{20})\.json$")
BUCKET = "sustained"


# ---------------------------------------------------------------------------------------------- store


class S3Stack:
    """The local S3 API server, a bucket, and the counting proxy in front of it (bench/s3_bench.py's
    setup), plus a second proxy for this process's own reads (the server serves one request at a time:
    what the benchmark asks of it is load too, counted apart). Every subprocess is stopped by its pid."""

    def __init__(self) -> None:
        self.server = LocalS3Server().start()
        self.proxy: ProxyProcess | None = None
        self.bench_proxy: ProxyProcess | None = None
        try:
            self.server.create_bucket(BUCKET)
            self.proxy = ProxyProcess(self.server.endpoint).start()
            self.bench_proxy = ProxyProcess(self.server.endpoint).start()
        except BaseException:
            self.stop()
            raise
        self.warehouse = f"s3://{BUCKET}/wh"

    def options(self, endpoint: str) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "sustained",
            "AWS_SECRET_ACCESS_KEY": "sustained",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def gateway_env(self) -> dict[str, str]:
        """The gateway's environment: AWS's usual variables, pointing at its proxy."""
        assert self.proxy is not None
        return self.options(self.proxy.endpoint)

    def bench_options(self) -> dict[str, str]:
        """Storage options of this process's reads, through the second proxy."""
        assert self.bench_proxy is not None
        return self.options(self.bench_proxy.endpoint)

    def requests(self) -> dict[str, int]:
        """The requests so far, by S3 operation: the gateway's, and this process's as ``bench:<op>``."""
        assert self.proxy is not None and self.bench_proxy is not None
        out = {k: v for k, v in self.proxy.counts().items() if k != "injected_errors"}
        for k, v in self.bench_proxy.counts().items():
            if k != "injected_errors":
                out[f"bench:{k}"] = v
        return out

    def stop(self) -> None:
        for proxy in (self.bench_proxy, self.proxy):
            if proxy is not None:
                proxy.stop()
        self.server.stop()


class TopicTable:
    """The topic's Delta table as this process reads it: through delta-rs with storage options, and its
    ``_delta_log`` listed through the store (a local directory or S3 keys)."""

    def __init__(self, warehouse: str, options: dict[str, str] | None = None) -> None:
        storage = Storage(warehouse, options)
        self.uri = storage.topic_uri(TOPIC)
        self.options = storage.options()
        self.local = storage.is_local
        self._fs = storage.filesystem(self.uri)
        self._dt: DeltaTable | None = None

    def delta_table(self) -> DeltaTable:
        """The table's latest version: the handle of the last call brought up to date (only the new log
        entries are read: on S3 a fresh load read every entry since the last checkpoint, hundreds, and a
        sample took ~55 s on a loaded store), else loaded afresh; loaded again when log cleanup removed an
        entry delta-rs had just listed (``File not found: .../_delta_log/N.json``: a race)."""
        if self._dt is not None:
            try:
                self._dt.update_incremental()
                return self._dt
            except DeltaError:
                self._dt = None  # its next entries were cleaned up: load from the checkpoint
        for attempt in range(10):
            try:
                self._dt = DeltaTable(self.uri, storage_options=self.options)
                return self._dt
            except DeltaError:
                if attempt == 9:
                    raise
                time.sleep(0.1)
        raise AssertionError("unreachable")

    def log_names(self) -> list[str]:
        """Names of the files in ``_delta_log`` (JSON entries, checkpoints, ``_last_checkpoint``)."""
        infos = self._fs.get_file_info(pafs.FileSelector("_delta_log", allow_not_found=True))
        return [info.base_name for info in infos]

    def read_log(self, name: str) -> bytes:
        with self._fs.open_input_stream(f"_delta_log/{name}") as f:
            data: bytes = f.read()
        return data


# ---------------------------------------------------------------------------------------------- metrics


ROUNDS = "topiclake_topic_maintenance_round_seconds_bucket{"


def scrape(http: httpx.Client) -> dict[str, Any]:
    """The counters this benchmark needs from ``/metrics``: the produce latency histogram (native API,
    acks=all; cumulative bucket counts by upper bound), produced records and Delta commits of the topic."""
    text = idempotent_get(http, "/metrics").text
    buckets: dict[float, float] = {}
    commit_buckets: dict[float, float] = {}
    round_buckets: dict[float, float] = {}
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
        elif (
            line.startswith("topiclake_topic_maintenance_round_seconds_bucket{")
            and f'topic="{TOPIC}"' in line
        ):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            round_buckets[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return {
        "buckets": buckets,
        "records": records,
        "commits": commits,
        "commit_buckets": commit_buckets,
        "committed_records": committed,
        "round_buckets": round_buckets,
    }


def longest_round_s(before: dict[float, float], after: dict[float, float]) -> float | None:
    """An upper bound on the longest maintenance round between two scrapes: the highest bucket of the
    round-duration histogram whose count grew (60 s for the open last one); None without a round."""
    longest = None
    below = 0.0
    for bound in sorted(after):
        grew = (after[bound] - before.get(bound, 0.0)) - below  # rounds within this bucket, not below it
        below += grew
        if grew > 0:
            longest = 60.0 if math.isinf(bound) else bound
    return longest


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


def log_watcher(table: TopicTable, clock: Clock, state: LogState, stop: threading.Event) -> None:
    """Every 0.2 s (1 s on S3), reads the commitInfo of each new ``_delta_log`` entry: the broker's
    appends carry ``topiclake.commit`` and delta-rs's ``operationMetrics.execution_time_ms`` (the time of
    the whole ``write_deltalake`` call: Parquet file and log entry), compactions ``topiclake.operation``."""
    interval = 0.2 if table.local else 1.0  # on S3 each look is a LIST of _delta_log
    while not stop.wait(interval):
        try:
            versions = sorted(int(m.group(1)) for name in table.log_names() if (m := LOG_ENTRY.match(name)))
        except (OSError, pa.ArrowException) as exc:
            state.failure = str(exc)
            continue
        for v in versions:
            if v <= state.last_version:
                continue
            if state.last_version >= 0:
                state.missed += v - state.last_version - 1
            state.last_version = v
            try:
                lines = table.read_log(f"{v:020d}.json").splitlines()
            except (OSError, pa.ArrowException):
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
    during one maintenance round (a round is due every N versions; :func:`round_allowance` adds what a
    partition commits beyond N while a slow round runs)."""
    tiers = tier(max(records_in_segment, 1), n) + 1
    return (n - 1) * tiers + n


def round_allowance(commits_per_s: float, round_s: float | None, n: int = CONFIG.compact_min_files) -> int:
    """Files a partition can gain beyond the bound's N while one round runs: each commit adds at most one
    file to a partition, so ``commits_per_s`` (the topic's) times the window's longest round, less N.
    Zero while rounds keep up; on a starved machine (a loaded CI) a round of 1 s at 50 commits/s lets
    a partition gain ~50 files before the next round can merge them."""
    if not round_s:
        return 0
    return max(math.ceil(commits_per_s * round_s) - n, 0)


@dataclass
class TableSample:
    files: dict[int, int]  # partition -> active files
    bounds: dict[int, int]  # partition -> bound (sum over its segments)
    log_files: int
    rss_mb: float | None


def sample_table(table: TopicTable, gateway: GatewayProcess) -> TableSample:
    files: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
    bounds: dict[int, int] = {p: file_bound(0) for p in range(PARTITIONS)}
    adds = pa.table(table.delta_table().get_add_actions(flatten=True))
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
    log_files = len(table.log_names())
    return TableSample(files, bounds, log_files, gateway.rss_mb())


COMPACTED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO \S+: topic \S+ partition \d+ segment \d+: "
    r"compacted (\d+) files"
)


def compactions_logged(log: Path, clock: Clock) -> dict[int, tuple[int, int]]:
    """Window -> (runs merged, files they merged), from the gateway's INFO lines of maintenance
    (``compacted N files``); empty when the gateway logs at ``warning``."""
    out: dict[int, tuple[int, int]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = COMPACTED.match(line)
        if m is None:
            continue
        epoch = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        w = clock.window_of_epoch_ms(epoch * 1000)
        runs, files = out.get(w, (0, 0))
        out[w] = (runs + 1, files + int(m.group(3)))
    return out


def gateway_warnings(log: Path) -> Counter[str]:
    """Warning and error lines of the gateway's log, counted by message with numbers blanked out."""
    kinds: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"\b(?:WARNING|ERROR|CRITICAL)\b.*", line)
        if m:
            kinds[re.sub(r"\d+", "N", m.group(0))[:160]] += 1
    return kinds
