"""What the Spark job tests share: topics produced through a real broker, table contents, and the check that
the gateway's core still appends to and reads a topic after a job."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_app_id

BASE_TS = 1_700_000_000_000

# (partition, offset) -> (key, value, timestamp ms)
Rows = dict[tuple[int, int], tuple[bytes | None, bytes | None, int]]


@dataclass
class Topic:
    """A topic made for a test, and every record acknowledged for it."""

    storage: Storage
    name: str
    partitions: int
    produced: Rows = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.storage.topic_uri(self.name)


def make_topic(
    warehouse: str,
    name: str = "orders",
    *,
    partitions: int = 2,
    configs: dict[str, str | int] | None = None,
    batches: Iterable[tuple[int, list[Record]]] = (),
) -> Topic:
    """Create a topic and produce ``batches`` (partition, records), one request (one commit, one file)
    each, through a broker without background maintenance."""
    storage = Storage(warehouse)
    topic = Topic(storage, name, partitions)
    with Broker(storage, BrokerConfig(maintenance=False, linger_ms=0)) as broker:
        broker.create_topic(name, partitions=partitions, configs=configs or {})
        for partition, records in batches:
            produce(broker, topic, partition, records)
    return topic


def produce(broker: Broker, topic: Topic, partition: int, records: list[Record]) -> list[int]:
    """Produce with acks=all; record what was acknowledged; return the offsets."""
    results = broker.produce(topic.name, records, partition=partition, acks="all")
    offsets = []
    for r, rec in zip(results, records, strict=True):
        assert r.error is None and r.offset is not None, r
        ts = rec.timestamp_ms if rec.timestamp_ms is not None else r.timestamp_ms
        topic.produced[(partition, r.offset)] = (rec.key, rec.value, int(ts or 0))
        offsets.append(r.offset)
    return offsets


def rounds(
    partitions: int,
    n_rounds: int,
    per_round: int,
    *,
    key: Callable[[int, int, int], bytes | None] | None = None,
    ts_step_ms: int = 1000,
) -> list[tuple[int, list[Record]]]:
    """``n_rounds`` requests of ``per_round`` records per partition; record timestamps grow by round."""
    out = []
    for r in range(n_rounds):
        for p in range(partitions):
            out.append(
                (
                    p,
                    [
                        Record(
                            key=key(p, r, i) if key else f"k{p}-{r}-{i}".encode(),
                            value=f"v{p}-{r}-{i}".encode(),
                            timestamp_ms=BASE_TS + r * ts_step_ms + i,
                        )
                        for i in range(per_round)
                    ],
                )
            )
    return out


def table_rows(uri: str) -> Rows:
    """Every record in the topic table now."""
    t = DeltaTable(uri).to_pyarrow_table(columns=["partition", "offset", "key", "value", "timestamp"])
    ts = pa.compute.cast(t["timestamp"], pa.int64()).to_pylist()
    out: Rows = {}
    for p, o, k, v, us in zip(
        t["partition"].to_pylist(),
        t["offset"].to_pylist(),
        t["key"].to_pylist(),
        t["value"].to_pylist(),
        ts,
        strict=True,
    ):
        assert (p, o) not in out, f"offset {o} of partition {p} is in the table twice"
        out[(p, o)] = (k, v, us // 1000)
    return out


def add_actions(uri: str) -> list[dict[str, object]]:
    return pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()


def segments(uri: str, partition: int) -> list[int]:
    found = {
        int(str(a["partition.segment"])) for a in add_actions(uri) if a["partition.partition"] == partition
    }
    return sorted(found)


def file_offsets(uri: str) -> list[tuple[int, int, list[int]]]:
    """(partition, segment, offsets in file order) of every data file."""
    out = []
    for a in add_actions(uri):
        offsets = pq.read_table(Path(uri) / str(a["path"]), columns=["offset"])["offset"].to_pylist()
        out.append((int(str(a["partition.partition"])), int(str(a["partition.segment"])), offsets))
    return out


def commit_actions(uri: str, version: int) -> list[dict[str, object]]:
    """The actions of one commit, from its log entry."""
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hwm(uri: str, topic: str, partition: int) -> int:
    return DeltaTable(uri).transaction_version(partition_app_id(topic, partition)) or 0


def check_core_after_job(topic: Topic, removed: Iterable[tuple[int, int]] = ()) -> None:
    """A fresh broker on the warehouse continues every partition at its old end, and serves exactly the
    records left in the table plus the new ones, from the log start on, in offset order."""
    gone = set(removed)
    ends = {p: hwm(topic.uri, topic.name, p) for p in range(topic.partitions)}
    with Broker(topic.storage, BrokerConfig(maintenance=False, linger_ms=0)) as broker:
        for p in range(topic.partitions):
            assert broker.list_offsets(topic.name, p, "latest") == ends[p], p
            new = produce(broker, topic, p, [Record(key=b"after", value=f"after-{p}".encode())])
            assert new == [ends[p]], (p, new, ends[p])
        expected = {k: v for k, v in topic.produced.items() if k not in gone}
        for p in range(topic.partitions):
            start = broker.list_offsets(topic.name, p, "earliest")
            assert start is not None
            rows: list[dict[str, object]] = []
            offset = start
            while offset < ends[p] + 1:
                batch = broker.fetch(topic.name, p, offset, max_records=1000)
                assert batch.records.num_rows, f"nothing fetched at {offset} of partition {p}"
                rows.extend(batch.records.to_pylist())
                offset = batch.next_offset
            offsets = [int(str(r["offset"])) for r in rows]
            assert offsets == sorted(offsets), p
            want = sorted(o for (q, o) in expected if q == p)
            assert offsets == want, (p, offsets, want)
            for r in rows:
                key = (p, int(str(r["offset"])))
                assert (r["key"], r["value"]) == expected[key][:2], key
