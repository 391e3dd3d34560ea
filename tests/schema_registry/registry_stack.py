"""A broker with its gateway and its schema registry, each a real uvicorn server on a free 127.0.0.1 port.

Imported by name (``from registry_stack import ...``); the name is unique in the test tree.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.process.ports import free_port
from topiclake.schema_registry import SchemaRegistry
from topiclake.schema_registry.http import create_registry_app
from topiclake.settings import GatewaySettings


@dataclass
class Stack:
    """The running servers: the gateway's and the registry's base URLs, the broker and the registry."""

    gateway_url: str
    registry_url: str
    broker: Broker
    registry: SchemaRegistry
    warehouse: Path
    kafka_bootstrap: str = ""


def _start(app: object, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    return server, thread


@contextlib.contextmanager
def running_stack(warehouse: Path, kafka: bool = False) -> Iterator[Stack]:
    """Start a broker, its gateway and its registry over ``warehouse`` (and the gateway's Kafka listener
    with ``kafka``); stop them all on exit."""
    port, registry_port = free_port(), free_port()
    kafka_port = free_port() if kafka else 0
    config = BrokerConfig(linger_ms=1.0)
    settings = GatewaySettings(
        warehouse=str(warehouse),
        host="127.0.0.1",
        port=port,
        schema_registry_port=registry_port,
        broker=config,
        kafka_port=kafka_port,
    )
    storage = Storage(str(warehouse))
    broker = Broker(storage, config)
    registry = SchemaRegistry(storage)
    servers = [
        _start(create_app(settings, broker=broker, schema_registry=registry), port),
        _start(create_registry_app(registry), registry_port),
    ]
    try:
        yield Stack(
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{registry_port}",
            broker,
            registry,
            warehouse,
            f"127.0.0.1:{kafka_port}" if kafka_port else "",
        )
    finally:
        for server, _ in servers:
            server.should_exit = True
        for _, thread in servers:
            thread.join(10)
        broker.close()
