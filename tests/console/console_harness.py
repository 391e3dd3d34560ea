"""What the console's browser tests share: the gateway they run against, its data, where screenshots go.

Imported by name (``from console_harness import ...``): a name unique in the test tree, unlike conftest.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from gateway_harness import Gateway

REPO = Path(__file__).resolve().parents[2]
# Set TOPICLAKE_SCREENSHOTS=1 to (re)write the screenshots of docs/console.md into docs/console/.
SCREENSHOTS = REPO / "docs" / "console" if os.environ.get("TOPICLAKE_SCREENSHOTS") else None


@dataclass
class Console:
    """The gateway under test and what the fixture put in it."""

    gw: Gateway
    url: str

    def api(self, path: str) -> Any:
        """GET a native API route, as JSON."""
        response = self.gw.client.get(path)
        response.raise_for_status()
        return response.json()


def seed(gw: Gateway) -> None:
    c = gw.client
    c.post(
        "/v1/topics", json={"name": "orders", "partitions": 3, "configs": {"retention.ms": "86400000"}}
    ).raise_for_status()
    c.post("/v1/topics", json={"name": "sensor-readings", "partitions": 1}).raise_for_status()
    records = [
        {
            "key": f"customer-{i % 7}",
            "value": {"order": i, "total": round(i * 3.7, 2), "items": ["book", "pen"][: 1 + i % 2]},
            "headers": {"source": "web" if i % 2 else "app"},
        }
        for i in range(90)
    ]
    c.post("/v1/topics/orders/records", json={"records": records}).raise_for_status()
    binary = [{"key": None, "value": "AAECAwQFBgcICQoLDA0ODw=="} for _ in range(5)]
    c.post("/v1/topics/sensor-readings/records?encoding=binary", json={"records": binary}).raise_for_status()
    # billing: a lagging group with committed offsets and no members (resettable)
    offsets = [{"topic": "orders", "partition": p, "offset": 3} for p in range(3)]
    c.post("/v1/groups/billing/offsets", json={"offsets": offsets}).raise_for_status()
    # shipping: a group with a live member
    c.post(
        "/v1/groups/shipping/members",
        json={"topics": ["orders"], "client_id": "shipper-1", "session_timeout_ms": 300000},
    ).raise_for_status()
