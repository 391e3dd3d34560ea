"""A small in-memory time series of what the console charts: rates from the gateway's metrics, group lag.

Every ``interval_s`` a thread reads the broker's own Prometheus counters (:mod:`topiclake.api.metrics`):
records produced and fetched per topic, turned into rates; the total lag of every consumer group and the
lag of each of its partitions; and the jobs (compaction, retention, VACUUM) seen in the topic tables'
Delta history (once a minute on object storage, where listing each topic's log is a billed request; the
groups other processes committed to are looked for as seldom there). It
keeps the last ``points`` samples of each series (an hour at the default 10 s) and nothing on disk: a
restarted broker starts its charts empty.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import Counter

from topiclake.console.jobs_seen import JobsSeen
from topiclake.errors import TopiclakeError
from topiclake.platform import Broker
from topiclake.platform.log.table_info import JobRun

logger = logging.getLogger(__name__)

Point = tuple[float, float]

#: Seconds between scans of the topics' Delta history on object storage (every sample on a local disk),
#: unless the gateway's ``console_object_scan_ms`` says otherwise.
OBJECT_STORE_JOBS_S = 60.0


@dataclass
class Series:
    """Timestamps (s since the epoch) and values of one chart line, oldest first, bounded."""

    points: deque[Point] = field(default_factory=lambda: deque(maxlen=360))

    def add(self, t: float, value: float) -> None:
        """Append a point (the oldest falls off when full)."""
        self.points.append((t, value))

    def last(self, n: int) -> list[float]:
        """The last ``n`` values."""
        return [v for _, v in list(self.points)[-n:]]


def _totals(counter: Counter) -> dict[str, float]:
    """The ``_total`` sample of every label value of a one-label counter."""
    out: dict[str, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                out[next(iter(sample.labels.values()), "")] = sample.value
    return out


class Sampler:
    """Samples rates and lag into bounded series; read by the console's pages and chart endpoints.

    Args:
        broker: The broker whose groups and topics are sampled.
        produced: The gateway's counter of records produced, by topic (``topiclake_produced_records``).
        fetched: Its counter of records fetched, by topic (``topiclake_fetched_records``).
        interval_s: Seconds between samples.
        points: Samples kept per series.
    """

    def __init__(
        self,
        broker: Broker,
        produced: Counter,
        fetched: Counter,
        interval_s: float = 10.0,
        points: int = 360,
        object_scan_s: float = OBJECT_STORE_JOBS_S,
    ) -> None:
        self.broker = broker
        self.produced = produced
        self.fetched = fetched
        self.interval_s = interval_s
        self.points = points
        self.jobs = JobsSeen(broker.storage)
        # the history scan lists every topic's log: on object storage each listing is a billed request
        self.jobs_every_s = interval_s if broker.storage.is_local else max(interval_s, object_scan_s)
        # groups committed by other processes (Spark, other brokers) need a look at the offsets table's
        # log; this broker's own commits are in memory: on object storage look as seldom as for jobs
        self.offsets_max_age_s = 0.0 if broker.storage.is_local else self.jobs_every_s
        self._jobs_scanned: float | None = None
        self._series: dict[str, Series] = {}
        self._last: dict[str, tuple[float, float]] = {}
        self._previous_round: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Take a first sample and start the sampling thread."""
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop sampling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a sampling round must never kill the thread
                logger.exception("console: sampling round failed")
            self._stop.wait(self.interval_s)

    # ------------------------------------------------------------------ sampling

    def sample(self, now: float | None = None) -> None:
        """One round: produce/fetch rates, group lag, jobs seen in the Delta history."""
        now = time.time() if now is None else now
        produced = _totals(self.produced)
        fetched = _totals(self.fetched)
        self._rates("produce", produced, now)
        self._rates("fetch", fetched, now)
        for group in self.broker.groups.list_groups(self.offsets_max_age_s):
            try:
                rows = self.broker.groups.lag(group.group_id, max_age_s=self.offsets_max_age_s)
            except TopiclakeError as exc:
                logger.debug("console: no lag for group %s: %s", group.group_id, exc)
                continue
            self._add(f"lag:{group.group_id}", now, float(sum(r.lag for r in rows)))
            for r in rows:
                self._add(f"lag:{group.group_id}:{r.topic}:{r.partition}", now, float(r.lag))
        if self._jobs_scanned is None or now - self._jobs_scanned >= self.jobs_every_s - 0.5:
            self.jobs.scan(t.name for t in self.broker.list_topics())
            self._jobs_scanned = now
        self._previous_round = now

    def _rates(self, kind: str, totals: dict[str, float], now: float) -> None:
        total = 0.0
        for topic, value in totals.items():
            total += self._rate(f"{kind}:{topic}", value, now)
        self._add(f"{kind}:*", now, total)

    def _rate(self, name: str, value: float, now: float) -> float:
        with self._lock:
            previous = self._last.get(name)
            self._last[name] = (now, value)
        if previous is None and self._previous_round is not None:
            previous = (self._previous_round, 0.0)  # a topic first counted since the last round
        if previous is None or now <= previous[0]:
            rate = 0.0
        else:
            rate = max(value - previous[1], 0.0) / (now - previous[0])
        self._add(name, now, rate)
        return rate

    def _add(self, name: str, t: float, value: float) -> None:
        with self._lock:
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = Series(deque(maxlen=self.points))
            series.add(t, value)

    # ------------------------------------------------------------------ reading

    def series(self, name: str) -> list[Point]:
        """The points of one series (empty if never sampled).

        Names: ``produce:*``, ``fetch:*`` (records/s of all topics), ``produce:<topic>``,
        ``fetch:<topic>``, ``lag:<group>`` (total lag), ``lag:<group>:<topic>:<partition>``.
        """
        with self._lock:
            series = self._series.get(name)
            return list(series.points) if series is not None else []

    def names(self, prefix: str) -> list[str]:
        """The series whose name starts with ``prefix``."""
        with self._lock:
            return sorted(n for n in self._series if n.startswith(prefix))

    def growing_lag(self, groups: Iterable[str], samples: int = 4) -> list[str]:
        """Groups whose total lag rose over the last ``samples`` rounds and never fell in between (a
        stuck or slow consumer; a consumer that keeps up brings its lag back down)."""
        out = []
        for group in groups:
            values = [v for _, v in self.series(f"lag:{group}")[-samples:]]
            if (
                len(values) == samples
                and values[-1] > values[0]
                and all(b >= a for a, b in itertools.pairwise(values))
            ):
                out.append(group)
        return out

    def job_runs(self, topic: str) -> dict[str, JobRun]:
        """The newest run of each job kind seen on a topic since this broker started."""
        return self.jobs.latest(topic)
