"""The maintainer's state of a local topic table (platform/log/local_state.py): kept from the entries the
broker's appender wrote, equal to what delta-rs reads at the same version, seeded again from delta-rs only
when entries it needs are gone or a foreign file lacks offset statistics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log.file_index import FileIndex, build_index
from topiclake.platform.log.local_state import LocalTableState
from topiclake.platform.log.topic_log import partition_app_id

# maintenance every 20 ms, compaction at 4 files; no cleanup within the test (entries stay readable)
BUSY = {"maintenance_interval_ms": 20, "compact_min_files": 4, "log_retention_ms": 600_000}


def _files(index: FileIndex) -> set[tuple[str, int, int, int, int]]:
    return {
        (f.path, f.partition, f.min_offset, f.max_offset, f.num_records)
        for p in index.partitions()
        for f in index.files(p)
    }


def _delta_rs_files(uri: str, storage: Storage, version: int) -> set[tuple[str, int, int, int, int]]:
    return _files(build_index(DeltaTable(uri, version=version), storage.filesystem(uri)))


def test_the_maintainer_keeps_its_index_from_the_appenders_entries_without_delta_rs(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(linger_ms=0, **BUSY)) as broker:  # type: ignore[arg-type]
        broker.create_topic("t", partitions=2)
        for i in range(120):
            broker.produce_arrow("t", i % 2, pa.table({"value": pa.array([b"%d" % i], pa.binary())}))
        log = broker.log("t")
        state = log.maintainer._local_state
        assert state is not None, "a local log's maintainer keeps its state from the appender's entries"
        deadline = time.monotonic() + 30
        while state.version < log.known_version() and time.monotonic() < deadline:
            time.sleep(0.05)
        with log.maintainer._lock:  # no round moves it while it is compared
            version = state.version
            ours = _files(state.index())
            ends = [state.txn_version(partition_app_id("t", p)) for p in range(2)]
        stats = log.maintainer.stats
        assert stats.compactions > 0, stats  # compaction ran from this state's index
        assert ours == _delta_rs_files(log.uri, storage, version)
        assert ends == [60, 60]
        assert state.seeds == 1, "delta-rs opened once, at the first round"
        # only entries the appender did not hand over are read from the disk (at most compaction's own;
        # none when every round caught up from the handed entries: seen in a loaded full run)
        assert state.entries_read <= stats.compaction_commits + 2 < version / 2


def test_other_writers_entries_are_read_and_a_cleanup_past_the_state_seeds_it_again(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(linger_ms=0, maintenance_interval_ms=600_000, log_retention_ms=600_000)
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"a")], partition=0)
        uri = broker.log("t").uri
    state = LocalTableState(uri, lambda: DeltaTable(uri), storage.filesystem(uri))
    state.catch_up(lambda _v: None)
    assert state.seeds == 1 and state.txn_version(partition_app_id("t", 0)) == 1
    with Broker(storage, config) as broker:  # another writer: nothing handed over, read from the disk
        for i in range(3):
            broker.produce("t", [Record(value=b"%d" % i)], partition=0)
    state.catch_up(lambda _v: None)
    newest = DeltaTable(uri).version()
    assert (state.version, state.seeds) == (newest, 1) and state.entries_read >= 3
    assert _files(state.index()) == _delta_rs_files(uri, storage, newest)
    assert state.txn_version(partition_app_id("t", 0)) == 4
    with Broker(storage, config) as broker:
        for i in range(3):
            broker.produce("t", [Record(value=b"%d" % i)], partition=0)
    dt = DeltaTable(uri)
    dt.create_checkpoint()  # and the entries before it gone, as another writer's cleanup deletes them
    for version in range(state.version + 1, dt.version()):
        Path(uri, "_delta_log", f"{version:020d}.json").unlink()
    state.catch_up(lambda _v: None)
    assert (state.version, state.seeds) == (dt.version(), 2)
    assert _files(state.index()) == _delta_rs_files(uri, storage, dt.version())
    assert state.txn_version(partition_app_id("t", 0)) == 7


def test_a_foreign_file_without_offset_statistics_seeds_the_state_again(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    config = BrokerConfig(linger_ms=0, maintenance_interval_ms=600_000)
    with Broker(storage, config) as broker:
        broker.create_topic("t", partitions=1)
        broker.produce("t", [Record(value=b"a"), Record(value=b"b")], partition=0)
        uri = broker.log("t").uri
    state = LocalTableState(uri, lambda: DeltaTable(uri), storage.filesystem(uri))
    state.catch_up(lambda _v: None)
    log_dir = Path(uri, "_delta_log")
    newest = DeltaTable(uri).version()
    entry = [json.loads(line) for line in (log_dir / f"{newest:020d}.json").read_text().splitlines()]
    add = next(a["add"] for a in entry if "add" in a)
    # the same file added again by a writer that kept no statistics (delta-rs reads its footer)
    foreign = {"add": {**add, "stats": None}}
    (log_dir / f"{newest + 1:020d}.json").write_text(json.dumps(foreign) + "\n")
    state.catch_up(lambda _v: None)
    assert (state.version, state.seeds) == (newest + 1, 2)
    assert [(f.min_offset, f.max_offset) for f in state.index().files(0)] == [(0, 1)]
