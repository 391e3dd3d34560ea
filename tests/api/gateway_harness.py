"""Harness for end-to-end tests: a real uvicorn server on 127.0.0.1 (a free port) over a warehouse.

Imported by name (``from gateway_harness import ...``): pytest puts this folder on the import path for the
tests in it, and the name is unique in the test tree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import uvicorn
from deltalake import DeltaTable

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.process.ports import free_port
from topiclake.settings import GatewaySettings


@dataclass
class Gateway:
    """A running gateway: its base URL, the broker behind it and the warehouse's storage."""

    url: str
    broker: Broker
    storage: Storage
    client: httpx.Client


def start_gateway(
    warehouse: Path,
    settings_overrides: dict[str, object] | None = None,
    kafka_port: int = 0,
    **broker_options: object,
) -> tuple[Gateway, uvicorn.Server, threading.Thread]:
    """Start uvicorn in a thread; return once it answers /healthz (``settings_overrides``: more
    GatewaySettings fields). The Kafka listener is off unless ``kafka_port`` is given (never 9092 by
    accident)."""
    port = free_port()
    config = BrokerConfig(**{"linger_ms": 1.0, **broker_options})  # type: ignore[arg-type]
    settings = GatewaySettings(
        warehouse=str(warehouse),
        host="127.0.0.1",
        port=port,
        broker=config,
        kafka_port=kafka_port,
        **(settings_overrides or {}),  # type: ignore[arg-type]
    )
    storage = Storage(str(warehouse))
    broker = Broker(storage, config)
    app = create_app(settings, broker=broker)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    client = httpx.Client(base_url=url, timeout=30)
    return Gateway(url, broker, storage, client), server, thread


def stop_gateway(gw: Gateway, server: uvicorn.Server, thread: threading.Thread) -> None:
    gw.client.close()
    server.should_exit = True
    thread.join(10)
    gw.broker.close()


def table_rows(gw: Gateway, topic: str) -> pa.Table:
    """A topic's table read directly with delta-rs, ordered by partition and offset."""

    table = DeltaTable(gw.storage.topic_uri(topic)).to_pyarrow_table()
    return table.sort_by([("partition", "ascending"), ("offset", "ascending")])


def table_version(gw: Gateway, topic: str) -> int:
    """The Delta version of a topic's table."""
    return DeltaTable(gw.storage.topic_uri(topic)).version()
