"""The jobs' put-if-absent commit on S3 (jobs/_commit.py), without Spark: the local S3 server, a real
broker, data files written by the executors' function and one conditional log entry.

A version taken by an append is skipped (the append's records and high watermark stand); a winner that
removed a file the rewrite read is a conflict; stores where a job cannot commit safely are refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from topiclake.errors import StorageError
from topiclake.jobs._commit import RewriteConflict, commit, put_entry, table_target, write_batches
from topiclake.jobs._tables import load_index
from topiclake.jobs.common import conflict_reason
from topiclake.objectstore import LocalS3Server
from topiclake.platform import Broker, BrokerConfig, Record, Storage, partition_app_id

TOPIC = "orders"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalS3Server]:
    with LocalS3Server() as s3:
        yield s3


def _options(server: LocalS3Server) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def _offsets(storage: Storage) -> list[int]:
    table = DeltaTable(storage.topic_uri(TOPIC), storage_options=storage.options()).to_pyarrow_table()
    return sorted(table["offset"].to_pylist())


def test_a_rewrite_commits_past_appends_and_loses_to_a_removal(server: LocalS3Server) -> None:
    server.create_bucket("jobs-commit")
    storage = Storage("s3://jobs-commit/wh", _options(server))
    uri = storage.topic_uri(TOPIC)
    with Broker(storage, BrokerConfig(linger_ms=0, maintenance=False)) as broker:
        broker.create_topic(TOPIC, partitions=1)
        for i in range(3):  # three commits: three files of segment 0
            broker.produce(TOPIC, [Record(key=b"k", value=b"v%d" % i)], acks="all")
        _, index = load_index(storage, TOPIC)
        files = index.files(0)
        assert len(files) == 3
        rows = DeltaTable(uri, storage_options=storage.options()).to_pyarrow_table()
        target = table_target(storage, TOPIC)
        adds = [
            pa.table(batch)["add"][0].as_py()
            for batch in write_batches(target, iter(rows.to_batches()), per_file=1000, data_change=False)
        ]
        assert len(adds) == 1
        actions = [orjson.loads(a) for a in adds]
        # a broker appends meanwhile: the rewrite's commit reads the latest snapshot and goes after it
        broker.produce(TOPIC, [Record(key=b"k", value=b"v3")], acks="all")
        metrics = {"numRemovedFiles": 3}
        version = commit(
            storage,
            TOPIC,
            index.version,
            files,
            actions,
            operation="OPTIMIZE",
            data_change=False,
            metrics=metrics,
            tag="topiclake:test:1",
        )
        assert version == index.version + 2
        assert _offsets(storage) == [0, 1, 2, 3]  # each record once: the 3 rewritten, the append kept
        dt = DeltaTable(uri, storage_options=storage.options())
        assert len(dt.file_uris()) == 2
        assert dt.transaction_version(partition_app_id(TOPIC, 0)) == 4  # the append's high watermark
        assert dt.history(1)[0]["engineInfo"].startswith("topiclake/")

        # planned on the old version: the files it read are gone, so it must plan again
        with pytest.raises(RewriteConflict) as lost:
            commit(
                storage,
                TOPIC,
                index.version,
                files,
                actions,
                operation="OPTIMIZE",
                data_change=False,
                metrics=metrics,
                tag="topiclake:test:2",
            )
        assert conflict_reason(lost.value) is not None  # retry_conflicts retries it
        assert _offsets(storage) == [0, 1, 2, 3]

        # the conditional PUT itself: versions taken by appends are skipped; one that removed a file
        # this entry reads is a conflict
        broker.produce(TOPIC, [Record(key=b"k", value=b"v4")], acks="all")
        _, now = load_index(storage, TOPIC)
        appended = now.files(0)[-1]
        info = {"commitInfo": {"operation": "TEST", "topiclake.commit": "c1"}}
        assert put_entry(target, version - 1, {appended.path}, [info], "c1") == now.version + 1
        assert put_entry(target, version - 1, set(), [info], "c2") == now.version + 2
        with pytest.raises(RewriteConflict, match="removed 1 file"):
            put_entry(target, index.version, {files[0].path}, [info], "c3")
        assert _offsets(storage) == [0, 1, 2, 3, 4]
        assert broker.produce(TOPIC, [Record(key=b"k", value=b"v5")], acks="all")[0].offset == 5


def test_stores_a_job_cannot_commit_to_safely_are_refused(
    server: LocalS3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    no_keys = Storage("s3://jobs-commit/wh", {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true"})
    with pytest.raises(StorageError, match="static keys"):
        table_target(no_keys, TOPIC)
    azure = Storage("abfss://lake@account.dfs.core.windows.net/wh", {"AZURE_STORAGE_ACCOUNT_NAME": "account"})
    with pytest.raises(StorageError, match="cannot commit"):
        table_target(azure, TOPIC)
