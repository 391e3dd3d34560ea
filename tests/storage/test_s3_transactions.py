"""Transactions on an S3 warehouse, one broker: a committed, an aborted and a still-open transaction; the
fetch (what every Kafka isolation level reads) and the topic's Delta table show the committed records only,
at contiguous offsets; ``_system/transactions`` is in the bucket, written after its creation by conditional
PUTs of the direct append path; a second broker on the same bucket carries the open transaction on and
commits it; a log entry's PUT whose answer was lost is committed once."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from s3_harness import S3Warehouse

from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.transactions import TransactionCoordinator
from topiclake.platform.transactions._table import Row, TransactionTable


def _batch(*values: str) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([None] * len(values), pa.binary()),
            "value": pa.array([v.encode() for v in values], pa.binary()),
            "timestamp_ms": pa.array([1_700_000_000_000] * len(values), pa.int64()),
        }
    )


def _fetched(broker: Broker) -> list[tuple[int, int, str]]:
    """Every record a fetch returns, fetching on as a consumer does (a fetch may stop at a file's end)."""
    out = []
    for p in range(2):
        end = broker.log("t").high_watermark(p)
        offset = 0
        while offset < end:
            rows = broker.fetch("t", p, offset).records.to_pylist()
            assert rows, f"nothing fetched at {p}/{offset} below the high watermark {end}"
            out += [(p, r["offset"], r["value"].decode()) for r in rows]
            offset = rows[-1]["offset"] + 1
    return sorted(out)


def _table(storage: Storage) -> list[tuple[int, int, str]]:
    rows = DeltaTable(storage.topic_uri("t"), storage_options=storage.options()).to_pyarrow_table()
    return sorted((r["partition"], r["offset"], r["value"].decode()) for r in rows.to_pylist())


def test_commit_abort_and_an_open_transaction_on_s3(s3: S3Warehouse) -> None:
    storage = Storage(s3.uri, s3.options)
    committed = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("t", partitions=2)
        coord = TransactionCoordinator(broker)
        try:
            info = coord.init_producer_id("tid", 60_000)
            pid, epoch = info.producer_id, info.epoch
            coord.add_partitions("tid", pid, epoch, [("t", 0), ("t", 1)])
            coord.stage("tid", pid, epoch, "t", 0, 0, _batch("a", "b"))
            coord.stage("tid", pid, epoch, "t", 1, 0, _batch("c"))
            coord.end_txn("tid", pid, epoch, commit=True)
            coord.add_partitions("tid", pid, epoch, [("t", 0)])
            coord.stage("tid", pid, epoch, "t", 0, 2, _batch("aborted"))
            coord.end_txn("tid", pid, epoch, commit=False)
            coord.add_partitions("tid", pid, epoch, [("t", 1)])
            coord.stage("tid", pid, epoch, "t", 1, 1, _batch("open"))  # answered: durable in the bucket
            assert _fetched(broker) == committed
            assert _table(storage) == committed
        finally:
            coord.close()
    # written by the direct object path (one conditional PUT an entry, tagged), after delta-rs created it
    system = DeltaTable(TransactionTable(storage).uri, storage_options=storage.options())
    tagged = [h for h in system.history() if "topiclake.commit" in h]
    assert len(tagged) == system.version() >= 8
    kinds = [r.kind for r in TransactionTable(storage).rows()]
    assert kinds.count("complete_commit") == 1 and kinds.count("complete_abort") == 1
    assert kinds.count("staged") == 4  # a, b + c, aborted, open
    # a second broker on the bucket: the open transaction carries on at the same epoch and commits
    with Broker(storage, BrokerConfig(linger_ms=1)) as again:
        coord = TransactionCoordinator(again)
        try:
            coord.end_txn("tid", pid, epoch, commit=True)
            assert _fetched(again) == [*committed, (1, 1, "open")]
        finally:
            coord.close()
    assert _table(storage) == [*committed, (1, 1, "open")]


def test_an_entry_put_whose_answer_was_lost_is_committed_once(s3: S3Warehouse) -> None:
    storage = Storage(s3.uri, s3.options)
    table = TransactionTable(storage)
    try:
        table.append([_row(0)])  # delta-rs creates the table
        table.append([_row(1)])  # the direct path from here on
        assert isinstance(table._fast, ObjectAppender)
        version = table._fast.version
        for seq in (2, 3):
            s3.proxy.cut_after_store(1, op="PUT", path_contains="_system/transactions/_delta_log/")
            table.append([_row(seq)])
        assert s3.proxy.counts().get("cut_after_store") == 2, "the fault did not fire"
        assert table._fast.landed_unseen == 2  # each retry found its own entry
        assert table._fast.version == version + 2  # one version each
    finally:
        table.close()
    assert sorted(r.txn_seq for r in TransactionTable(storage).rows()) == [0, 1, 2, 3]


def _row(seq: int) -> Row:
    return Row("staged", "tid", 7, 1, at_ms=1_000 + seq, txn_seq=seq, topic="t", partition=0, records=b"x")
