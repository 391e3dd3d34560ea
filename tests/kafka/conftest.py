"""Fixtures of the Kafka listener tests: a real gateway (HTTP + Kafka listener on free ports)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway


@dataclass
class KafkaGateway:
    """A running gateway and its Kafka bootstrap address."""

    gw: Gateway
    bootstrap: str
    port: int


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaGateway]:
    """A gateway whose Kafka listener is on a free port of 127.0.0.1."""
    port = free_port()
    gw, server, thread = start_gateway(tmp_path / "wh", kafka_port=port)
    try:
        yield KafkaGateway(gw, f"127.0.0.1:{port}", port)
    finally:
        stop_gateway(gw, server, thread)
