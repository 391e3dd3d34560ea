"""What the cluster, topic and job pages show, gathered from the broker (no HTTP here, no templates).

Brokers and leaders come only from :meth:`Broker.metadata`; offsets from :meth:`Broker.list_offsets`; the
Delta side from :mod:`topiclake.platform.log.table_info`; rates and lag history from the :class:`Sampler`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from topiclake.console.access import ALL, Visible
from topiclake.console.sampler import Sampler
from topiclake.errors import TopiclakeError
from topiclake.platform import Broker, TopicInfo
from topiclake.platform.catalog.topic_config import DEFAULTS
from topiclake.platform.cluster import ClusterMetadata, PartitionState
from topiclake.platform.log.table_info import JOB_KINDS, JobRun, TableDescription, describe_table

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerRow:
    """One broker of the overview."""

    broker_id: int
    address: str
    rack: str | None
    listeners: str
    leaders: int
    alive: bool
    controller: bool


@dataclass(frozen=True)
class PartitionRow:
    """One partition of a topic page."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start: int
    end: int
    files: int
    size_bytes: int

    @property
    def records(self) -> int:
        """Records in the log now (end minus start; key compaction may have removed some)."""
        return self.end - self.start


@dataclass
class TopicRow:
    """One topic: catalog, offsets and its Delta table."""

    info: TopicInfo
    partitions: list[PartitionRow]
    table: TableDescription | None
    jobs: dict[str, JobRun] = field(default_factory=dict)
    error: str | None = None

    @property
    def records(self) -> int:
        """Records in every partition."""
        return sum(p.records for p in self.partitions)

    @property
    def replication(self) -> int:
        """Replicas per partition (of the first partition)."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def overrides(self) -> dict[str, str]:
        """Configs set on this topic (not Kafka's default)."""
        return self.info.config.overrides()


@dataclass
class Overview:
    """The overview page."""

    cluster_id: str
    controller_id: int
    brokers: list[BrokerRow]
    topics: list[TopicRow]
    warnings: list[str]
    filtered: bool = False  # only the topics and groups the principal may Describe

    @property
    def partitions(self) -> int:
        """Partitions of all topics."""
        return sum(t.info.partitions for t in self.topics)

    @property
    def records(self) -> int:
        """Records of all topics."""
        return sum(t.records for t in self.topics)

    @property
    def size_bytes(self) -> int:
        """Bytes of all topic tables' data files."""
        return sum(t.table.size_bytes for t in self.topics if t.table is not None)


def brokers(meta: ClusterMetadata) -> list[BrokerRow]:
    """Every live broker with the number of partitions it leads."""
    leaders: dict[int, int] = {}
    for states in meta.partitions.values():
        for s in states:
            leaders[s.leader] = leaders.get(s.leader, 0) + 1
    return [
        BrokerRow(
            b.broker_id,
            f"{b.host}:{b.port}",
            b.rack,
            ", ".join(f"{e.name} {e.host}:{e.port}" for e in b.listeners),
            leaders.get(b.broker_id, 0),
            True,  # metadata lists live brokers only
            b.broker_id == meta.controller_id,
        )
        for b in meta.brokers
    ]


def offline(meta: ClusterMetadata, topic: Callable[[str], bool] = ALL.topic) -> list[PartitionState]:
    """Partitions with no live leader (of the topics ``topic`` accepts)."""
    live = {b.broker_id for b in meta.brokers}
    return [
        s for name, states in meta.partitions.items() if topic(name) for s in states if s.leader not in live
    ]


def topic_row(
    broker: Broker, info: TopicInfo, meta: ClusterMetadata, sampler: Sampler | None, history: int = 100
) -> TopicRow:
    """A topic with its partitions' leaders and offsets, its table, and the newest job runs (from the
    sampler and the last ``history`` commits of the table)."""
    error = None
    table: TableDescription | None = None
    try:
        table = describe_table(broker.storage, info.name, history if sampler is not None else 100)
    except TopiclakeError as exc:
        error = exc.message
    rows = []
    for p in range(info.partitions):
        state = meta.partition(info.name, p)
        files = table.partitions.get(p) if table is not None else None
        try:
            start = broker.list_offsets(info.name, p, "earliest") or 0
            end = broker.list_offsets(info.name, p, "latest") or 0
        except TopiclakeError as exc:  # NotLeader and friends once the cluster routes partitions
            error, start, end = exc.message, 0, 0
        rows.append(
            PartitionRow(
                p,
                state.leader if state else -1,
                state.replicas if state else (),
                state.isr if state else (),
                start,
                end,
                files.files if files else 0,
                files.size_bytes if files else 0,
            )
        )
    jobs = _merge_jobs(table, sampler.job_runs(info.name) if sampler is not None else {})
    return TopicRow(info, rows, table, jobs, error)


def _merge_jobs(table: TableDescription | None, seen: dict[str, JobRun]) -> dict[str, JobRun]:
    out = dict(seen)
    for kind in JOB_KINDS:
        run = table.last(kind) if table is not None else None
        if run is not None and (kind not in out or run.version > out[kind].version):
            out[kind] = run
    return out


def topic_rows(
    broker: Broker, sampler: Sampler | None, history: int = 0, visible: Visible = ALL
) -> list[TopicRow]:
    """Every topic ``visible`` lets the page list, by name (job runs from the sampler only, unless
    ``history`` commits are to be read)."""
    meta = broker.metadata()
    infos = [info for info in broker.list_topics() if visible.topic(info.name)]
    return [topic_row(broker, info, meta, sampler, history) for info in infos]


def overview(
    broker: Broker, sampler: Sampler | None, assets_missing: list[str], visible: Visible = ALL
) -> Overview:
    """The overview page: brokers, totals and warnings (totals and warnings over what ``visible``
    lets the principal see; brokers and the controller for everyone, as Kafka's Metadata)."""
    meta = broker.metadata()
    infos = [info for info in broker.list_topics() if visible.topic(info.name)]
    topics = [topic_row(broker, info, meta, sampler, 0) for info in infos]
    warnings = [
        f"partition {s.topic}/{s.partition} is offline: its leader {s.leader} is not a live broker"
        for s in offline(meta, visible.topic)
    ]
    if sampler is not None:
        groups = [g.group_id for g in broker.groups.list_groups() if visible.group(g.group_id)]
        warnings += [
            f"consumer group {g} is falling behind: its lag grew" for g in sampler.growing_lag(groups)
        ]
    for log in broker.open_logs():
        error = log.maintainer.stats.last_error
        if error and visible.topic(log.topic):
            warnings.append(f"maintenance of topic {log.topic} failed last: {error}")
    warnings += [t_error for t in topics if (t_error := t.error)]
    if assets_missing:
        warnings.append("the console's scripts are not installed: charts and live updates are off")
    return Overview(
        meta.cluster_id, meta.controller_id, brokers(meta), topics, warnings, not visible.everything
    )


def config_rows(info: TopicInfo) -> list[tuple[str, str, bool]]:
    """(name, value, is it the default) of every topic config."""
    return [(k, v, DEFAULTS.get(k) == v) for k, v in sorted(info.config.to_kafka().items())]


def job_commands(warehouse: str, topic: str) -> dict[str, str]:
    """The command that runs each job on a topic now."""
    base = f"topiclake jobs {{}} --warehouse {warehouse} --topic {topic}"
    return {
        "compaction": base.format("compact"),
        "key-compaction": base.format("compact-keys"),
        "retention": base.format("retention"),
        "vacuum": base.format("vacuum") + " --retention-hours 24",
    }
