"""Fixtures of the cluster tests: brokers in subprocesses, always stopped by pid."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_harness import BrokerProcess


@pytest.fixture
def start_brokers(tmp_path: Path) -> Iterator[Callable[..., list[BrokerProcess]]]:
    """``start_brokers(n)``: n brokers (ids 1..n) over one warehouse; each is stopped after the test."""
    started: list[BrokerProcess] = []
    warehouse = tmp_path / "wh"

    def start(count: int, *, first_id: int = 1, extra: list[str] | None = None) -> list[BrokerProcess]:
        new = [
            BrokerProcess(warehouse, i, tmp_path / f"broker-{i}.log", extra=extra)
            for i in range(first_id, first_id + count)
        ]
        started.extend(new)
        for b in new:
            b.start()
        return new

    try:
        yield start
    finally:
        for b in started:
            b.stop()


@pytest.fixture
def broker(start_brokers: Callable[..., list[BrokerProcess]]) -> BrokerProcess:
    """One broker (id 1): today's one-broker cluster."""
    return start_brokers(1)[0]
