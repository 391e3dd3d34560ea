"""Which mechanism keeps two writers of one Delta table apart on S3, and the Storage's refusals.

deltalake 1.6.6 commits on S3 with one ``PUT ..._delta_log/<version>.json`` carrying ``If-None-Match: *``
(seen through the proxy). These tests show that with it every acknowledged commit of two concurrent
committers is in the log exactly once, that without it (the proxy strips the header: a store without
conditional writes) acknowledged commits are lost, and that the Storage refuses such a store unless the
user says ``AWS_S3_ALLOW_UNSAFE_RENAME=true``.
"""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from s3_harness import S3Warehouse
from store_harness import Warehouse

from topiclake.errors import StorageError
from topiclake.platform import Storage
from topiclake.platform.storage import _commit_safety


@pytest.fixture(autouse=True)
def _fresh_probe_cache() -> None:
    _commit_safety._verified.clear()


def _race(
    uri: str, options: dict[str, str], writers: int = 2, commits: int = 15
) -> tuple[list[str], list[str]]:
    """Writers commit concurrently from one snapshot each; returns (acknowledged tags, tags in the log)."""
    empty = pa.table({"w": pa.array([], pa.int64())})
    write_deltalake(uri, empty, storage_options=options)
    acked: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(writers)

    def writer(w: int) -> None:
        dt = DeltaTable(uri, storage_options=options)
        start.wait()
        for i in range(commits):
            write_deltalake(
                dt,
                pa.table({"w": pa.array([w], pa.int64())}),
                mode="append",
                commit_properties=CommitProperties(
                    custom_metadata={"tag": f"{w}-{i}"}, max_commit_retries=200
                ),
            )
            with lock:
                acked.append(f"{w}-{i}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    dt = DeltaTable(uri, storage_options=options)
    in_log = [c["tag"] for c in dt.history() if "tag" in c]
    return acked, in_log


def test_conditional_put_gives_each_version_exactly_one_winner(store: Warehouse) -> None:
    store.proxy.reset()
    acked, in_log = _race(f"{store.uri}/race", store.options)
    assert len(acked) == 30
    assert sorted(in_log) == sorted(acked)  # nothing acknowledged is missing, nothing is there twice
    assert DeltaTable(f"{store.uri}/race", storage_options=store.options).version() == 30
    assert store.proxy.counts().get("COPY", 0) == 0  # no rename emulation: commits are conditional PUTs


def test_without_conditional_writes_acknowledged_commits_are_lost(s3: S3Warehouse) -> None:
    s3.proxy.ignore_conditions(True)
    acked, in_log = _race(f"{s3.uri}/race", s3.options, writers=4, commits=10)
    assert len(acked) == 40
    assert len(set(in_log)) < len(acked)  # overwritten versions: acknowledged commits gone


def test_storage_refuses_a_store_that_ignores_if_none_match(s3: S3Warehouse) -> None:
    s3.proxy.ignore_conditions(True)
    with pytest.raises(StorageError, match="ignores If-None-Match"):
        Storage(s3.uri, s3.options).verify_commit_safety()


def test_unsafe_opt_in_is_accepted_loudly(s3: S3Warehouse, caplog: pytest.LogCaptureFixture) -> None:
    s3.proxy.ignore_conditions(True)
    options = {**s3.options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    with caplog.at_level(logging.ERROR):
        assert Storage(s3.uri, options).verify_commit_safety() is False
    assert any("UNSAFE" in r.getMessage() for r in caplog.records)


def test_probe_passes_on_a_conditional_store_and_runs_once(store: Warehouse) -> None:
    store.proxy.reset()
    assert Storage(store.uri, store.options).verify_commit_safety() is True
    assert store.proxy.counts() == {"PUT": 2, "DELETE": 1}  # two conditional PUTs of one key, cleanup
    store.proxy.reset()
    assert Storage(store.uri, store.options).verify_commit_safety() is True
    assert store.proxy.counts() == {}  # cached per process and bucket


def test_fsync_and_disabled_conditional_put_are_refused_on_s3(s3: S3Warehouse) -> None:
    with pytest.raises(StorageError, match="fsync applies to local warehouses"):
        Storage(s3.uri, s3.options, fsync=True)
    with pytest.raises(StorageError, match="conditional_put=disabled"):
        Storage(s3.uri, {**s3.options, "conditional_put": "disabled"})
