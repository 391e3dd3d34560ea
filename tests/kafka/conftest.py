"""Fixtures of the Kafka listener tests: a real gateway (HTTP + Kafka listener on free ports)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import start_gateway, stop_gateway
from kafka_harness import KafkaGateway

from topiclake.process.ports import free_port


def _gateway(root: Path) -> Iterator[KafkaGateway]:
    port = free_port()
    gw, server, thread = start_gateway(root / "wh", kafka_port=port)
    try:
        yield KafkaGateway(gw, f"127.0.0.1:{port}", port)
    finally:
        stop_gateway(gw, server, thread)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaGateway]:
    """A gateway whose Kafka listener is on a free port of 127.0.0.1."""
    yield from _gateway(tmp_path)


@pytest.fixture(scope="module")
def module_kafka(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[KafkaGateway]:
    """The same, shared by the tests of one module that each use topics and ids of their own."""
    yield from _gateway(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
