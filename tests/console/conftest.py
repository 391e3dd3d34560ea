"""Fixtures of the console's browser tests: a real gateway with data, and headless Chromium (Debian's).

The browser is Debian's ``chromium`` driven by its ``chromedriver`` through Selenium; ``make test``
installs both (``make browser``). Without them the browser tests are skipped with the reason.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from console_harness import Console, seed
from gateway_harness import start_gateway, stop_gateway

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


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
        seed(gw)
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
