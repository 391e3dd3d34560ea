"""Fixtures of the end-to-end API tests (the harness itself is in gateway_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_harness import Gateway, start_gateway, stop_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A real gateway over a fresh warehouse, stopped after the test."""
    gw, server, thread = start_gateway(tmp_path / "wh")
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)


@pytest.fixture
def strict_gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway with ``auto_create_topics_enable`` off: a topic that does not exist stays unknown (404),
    as with Kafka's ``auto.create.topics.enable=false`` (tests/kafka/test_auto_create.py covers it on)."""
    gw, server, thread = start_gateway(tmp_path / "wh", auto_create_topics_enable=False)
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)
