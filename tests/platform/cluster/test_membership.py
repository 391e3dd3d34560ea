"""Membership over a real warehouse directory: liveness from the listing, reads only when a broker is new or
restarted, and the version markers the same listing carries (the object-storage design, on a disk)."""

from __future__ import annotations

import time
from pathlib import Path

from topiclake.platform import Storage
from topiclake.platform.catalog.system_objects import SystemObjects, VersionMarker, newest_markers
from topiclake.platform.cluster.membership import Membership
from topiclake.platform.cluster.metadata import BrokerEndpoint, Endpoint


def endpoint(broker_id: int, port: int, kafka: int = 0) -> BrokerEndpoint:
    listeners = [Endpoint("http", "127.0.0.1", port)]
    if kafka:
        listeners.append(Endpoint("kafka", "127.0.0.1", kafka))
    return BrokerEndpoint(broker_id, "127.0.0.1", port, None, tuple(listeners))


def test_a_restarted_broker_is_read_again_and_a_silent_one_dies(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    watcher = Membership(storage, 1, session_timeout_ms=600, heartbeat_interval_ms=100)
    first = Membership(storage, 2, session_timeout_ms=600, heartbeat_interval_ms=100)
    first.register(endpoint(2, 1111), wait_s=0)
    assert watcher.scan()[2].port == 1111
    # the same id comes back on another port (a kill -9 and a restart): its new incarnation is read
    again = Membership(storage, 2, session_timeout_ms=600, heartbeat_interval_ms=100)
    again.register(endpoint(2, 2222), wait_s=0)
    assert watcher.scan()[2].port == 2222
    # a listener started after the broker joined (the Kafka listener) is read at the next scan, once
    again.beat(endpoint(2, 2222, kafka=3333))
    kafka = watcher.scan()[2].listener("kafka")
    assert kafka is not None and kafka.port == 3333
    markers = [i.name for i in SystemObjects(storage).list() if i.name.startswith("_incarnation.2.")]
    assert markers == [f"_incarnation.2.{again.incarnation}.1"]  # the first advertisement's is gone
    # beats keep it alive on the watcher's clock; silence kills it
    for _ in range(4):
        time.sleep(0.2)
        again.beat(endpoint(2, 2222, kafka=3333))
        assert 2 in watcher.scan()
    time.sleep(0.8)
    assert 2 not in watcher.scan()
    # a clean stop removes its file and its incarnation marker
    again.deregister()
    assert not [i.name for i in SystemObjects(storage).list() if i.name.startswith(("2.", "_incarnation.2."))]


def test_version_markers_name_the_newest_version_and_tidy_the_old(tmp_path: Path) -> None:
    objects = SystemObjects(Storage(str(tmp_path)))
    state = VersionMarker(objects, "state")
    for version in (3, 4, 7):
        assert state.publish(version)
    VersionMarker(objects, "catalog").publish(2)
    names = sorted(i.name for i in objects.list())
    assert names == ["_catalog.2", "_state.7"]  # the writer deleted the markers it made stale
    assert newest_markers(objects.list()) == {"catalog": 2, "state": 7}
    assert state.publish(5)  # never goes back
    assert newest_markers(objects.list())["state"] == 7
