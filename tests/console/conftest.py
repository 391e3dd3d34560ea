"""Fixtures of the console's browser tests: a real gateway with data, and headless Chromium (Debian's).

The browser is Debian's ``chromium`` driven by its ``chromedriver`` through Selenium; ``make test``
installs both (``make browser``). Without them the browser tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
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


def _seed(gw: Gateway) -> None:
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


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A gateway with two topics, records, a lagging group and a group with a member; the console samples
    every 0.3 s, and lag grows over the first samples."""
    gw, server, thread = start_gateway(
        tmp_path_factory.mktemp("console"),
        settings_overrides={"console_sample_ms": 300},
        compact_min_files=4,  # the broker's maintenance compacts orders' partitions: a job on /ui/jobs
        maintenance_interval_ms=200,
        vacuum_interval_ms=1000,
        vacuum_retention_hours=0,
    )
    try:
        _seed(gw)
        for i in range(4):  # lag grows sample after sample: the overview warns about it
            more = [{"key": f"late-{i}-{j}", "value": {"late": j}} for j in range(5)]
            gw.client.post("/v1/topics/orders/records", json={"records": more}).raise_for_status()
            time.sleep(0.35)
        yield Console(gw, gw.url)
    finally:
        stop_gateway(gw, server, thread)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium at 1280 px wide, keeping the page's console messages."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (make browser)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
