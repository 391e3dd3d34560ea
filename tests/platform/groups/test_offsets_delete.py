"""Deleting some committed offsets of a group (Kafka's OffsetDelete) through the group coordinator."""

from __future__ import annotations

from pathlib import Path

import pytest

from topiclake.errors import GroupNotEmpty, GroupNotFound, InconsistentGroupProtocol
from topiclake.platform import Broker, BrokerConfig, Record, Storage


def test_delete_some_offsets_survives_a_restart_and_refuses_active_groups(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("t", partitions=2)
        broker.produce("t", [Record(value=b"x", partition=p) for p in (0, 1)])
        broker.groups.commit("g", None, -1, {("t", 0): 1, ("t", 1): 1})
        assert broker.groups.delete_offsets("g", [("t", 0), ("t", 9)]) == 1
        assert set(broker.groups.committed("g")) == {("t", 1)}
        with pytest.raises(GroupNotFound):
            broker.groups.delete_offsets("nobody", [("t", 0)])
        broker.groups.join("busy", topics=["t"])
        with pytest.raises(GroupNotEmpty):
            broker.groups.delete_offsets("busy", [("t", 0)])
        broker.groups.foreign_groups = lambda group: group == "g"
        with pytest.raises(InconsistentGroupProtocol):
            broker.groups.delete_offsets("g", [("t", 1)])
        broker.groups.foreign_groups = None
    with Broker(storage, BrokerConfig(linger_ms=1)) as restarted:
        assert set(restarted.groups.committed("g")) == {("t", 1)}
