"""Two registries on one warehouse (two brokers) agree: ids are never handed out twice, both see everything,
and the state is rebuilt from ``_system/schemas`` alone."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from deltalake import DeltaTable

from topiclake.platform import Storage
from topiclake.schema_registry import SchemaRegistry


def _schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]})


def test_concurrent_registrations_on_two_brokers_get_distinct_ids(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    brokers = [SchemaRegistry(storage, refresh_interval=0), SchemaRegistry(Storage(storage.root))]
    ids: dict[str, int] = {}
    lock = threading.Lock()

    def register(b: int) -> None:
        for i in range(6):
            sid = brokers[b].register(f"s{b}-{i}", _schema(10 * b + i))
            with lock:
                ids[f"s{b}-{i}"] = sid

    threads = [threading.Thread(target=register, args=(b,)) for b in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(ids) == 12 and sorted(ids.values()) == list(range(1, 13))
    for registry in brokers:
        assert registry.store.state(fresh=True).subjects.keys() == ids.keys()
        assert all(
            registry.schema_by_id(sid).schema == _schema(int(s[1]) * 10 + int(s[3:]))
            for s, sid in ids.items()
        )
    # the same schema under a new subject keeps its id, whichever broker registers it
    assert brokers[1].register("again", _schema(0)) == ids["s0-0"]
    # a fresh broker rebuilds the same state from the table alone
    fresh = SchemaRegistry(Storage(storage.root))
    assert fresh.subjects() == sorted([*ids, "again"])
    dt = DeltaTable(storage.system_uri("schemas"))
    assert dt.transaction_version("topiclake/schema_registry") == dt.to_pyarrow_table().num_rows == 13
