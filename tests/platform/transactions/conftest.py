"""Fixtures of the coordinator tests: a broker with a 2-partition topic ``t`` over a local warehouse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from topiclake.platform import Broker, BrokerConfig, Storage


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "wh"))


@pytest.fixture
def broker(storage: Storage) -> Iterator[Broker]:
    b = Broker(storage, BrokerConfig(linger_ms=1))
    b.create_topic("t", partitions=2)
    try:
        yield b
    finally:
        b.close()
