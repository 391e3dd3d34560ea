"""A real gateway for end-to-end tests: uvicorn on 127.0.0.1 (a free port) over a temporary warehouse."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from topiclake.api import create_app
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.settings import GatewaySettings


@dataclass
class Gateway:
    """A running gateway: its base URL, the broker behind it and the warehouse's storage."""

    url: str
    broker: Broker
    storage: Storage
    client: httpx.Client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gateway(
    warehouse: Path, **broker_options: object
) -> tuple[Gateway, uvicorn.Server, threading.Thread]:
    """Start uvicorn in a thread; return once it answers /healthz."""
    port = _free_port()
    config = BrokerConfig(**{"linger_ms": 1.0, **broker_options})  # type: ignore[arg-type]
    settings = GatewaySettings(warehouse=str(warehouse), host="127.0.0.1", port=port, broker=config)
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


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A real gateway over a fresh warehouse, stopped after the test."""
    gw, server, thread = start_gateway(tmp_path / "wh")
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)
