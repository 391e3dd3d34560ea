"""The console in a real browser (headless Chromium) against a real gateway: every page loads without
console errors and shows what the API says; the live tail shows a new record; the forms act."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from console_harness import SCREENSHOTS, Console
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

pytestmark = pytest.mark.slow

PAGES = {
    "overview": "/ui",
    "topics": "/ui/topics",
    "topic": "/ui/topics/orders",
    "messages": "/ui/topics/orders/messages?from=offset&offset=40&format=json&limit=6",
    "groups": "/ui/groups",
    "group": "/ui/groups/billing",
    "jobs": "/ui/jobs",
}


def _wait(browser: Any, timeout: float) -> WebDriverWait[Any]:
    """A wait that retries while htmx swaps or the page reloads under it."""
    return WebDriverWait(
        browser, timeout, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    )


def _errors(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _open(browser: Any, console: Console, path: str) -> None:
    browser.get(console.url + path)
    _wait(browser, 15).until(lambda b: b.execute_script("return document.readyState") == "complete")


def _text(browser: Any, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def _cells(browser: Any, row_css: str) -> list[str]:
    return [td.text for td in browser.find_element(By.CSS_SELECTOR, row_css).find_elements(By.TAG_NAME, "td")]


def _fits(browser: Any) -> bool:
    return bool(
        browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    )


def _screenshot(browser: Any, name: str) -> None:
    if SCREENSHOTS is None:
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height, chrome = browser.execute_script(
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]"
    )
    browser.set_window_size(1280, min(max(int(height), 600), 1800) + int(chrome))
    time.sleep(0.3)  # let the charts follow the new size
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    browser.set_window_size(1280, 900)


def test_every_page_loads_without_console_errors_and_fits(browser: Any, console: Console) -> None:
    browser.get_log("browser")  # drop earlier messages
    for name, path in PAGES.items():
        _open(browser, console, path)
        assert browser.find_element(By.TAG_NAME, "h1").text, name
        assert _errors(browser) == [], name
        assert _fits(browser), f"{name} scrolls horizontally at 1280 px"
    browser.set_window_size(390, 844)  # a phone
    try:
        for name, path in PAGES.items():
            _open(browser, console, path)
            assert _fits(browser), f"{name} scrolls horizontally on a phone"
            if SCREENSHOTS is not None and name == "group":
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                browser.save_screenshot(str(SCREENSHOTS / "phone-group.png"))
    finally:
        browser.set_window_size(1280, 900)


def test_overview_shows_brokers_totals_rates_and_warnings(browser: Any, console: Console) -> None:
    meta = console.api("/v1/metadata")
    topics = console.api("/v1/topics")["topics"]
    records = 0
    for t in topics:
        described = console.api(f"/v1/topics/{t['name']}")
        records += sum(o["end_offset"] - o["beginning_offset"] for o in described["offsets"])
    console.gw.client.post(
        "/v1/topics/orders/records", json={"records": [{"value": {"more": 1}}]}
    ).raise_for_status()  # billing's lag grows
    deadline = time.monotonic() + 10
    while True:
        _open(browser, console, "/ui")
        found = browser.find_elements(By.ID, "warnings")
        if (
            found and "consumer group billing is falling behind" in found[0].text
        ) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert "consumer group billing is falling behind" in _text(browser, "#warnings")
    records += 1
    assert _text(browser, "#stat-topics") == str(len(topics))
    assert _text(browser, "#stat-partitions") == str(sum(t["partitions"] for t in topics))
    assert _text(browser, "#stat-records") == f"{records:,}"
    row = _cells(browser, "#brokers tbody tr")
    broker = meta["brokers"][0]
    assert row[0] == str(broker["id"]) and row[1] == f"{broker['host']}:{broker['port']}"
    assert row[4] == str(sum(len(t["partitions"]) for t in meta["topics"]))  # leads every partition
    assert "controller" in row[6]
    _wait(browser, 10).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".chart[data-drawn]")))
    _screenshot(browser, "overview")
    assert _errors(browser) == []


def test_topics_and_topic_page_show_partitions_offsets_and_the_delta_side(
    browser: Any, console: Console
) -> None:
    _open(browser, console, "/ui/topics")
    for t in console.api("/v1/topics")["topics"]:
        row = _cells(browser, f'#topics tr[data-topic="{t["name"]}"]')
        assert row[0] == t["name"] and row[1] == str(t["partitions"])
    assert _cells(browser, '#topics tr[data-topic="orders"]')[3] == "1 d"  # retention.ms=86400000
    _screenshot(browser, "topics")

    _open(browser, console, "/ui/topics/orders")
    offsets = console.api("/v1/topics/orders")["offsets"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    assert len(rows) == 3
    for row, o in zip(rows, offsets, strict=True):
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[0] == str(o["partition"])
        assert cells[4] == f"{o['beginning_offset']:,}" and cells[5] == f"{o['end_offset']:,}"
        assert int(cells[7]) >= 1  # Delta data files of the partition
    version = int(_text(browser, "#stat-version"))
    assert version >= 1
    _wait(browser, 10).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".chart[data-drawn]")))
    _screenshot(browser, "topic")
    assert _errors(browser) == []


def test_a_topic_is_created_from_the_form(browser: Any, console: Console) -> None:
    _open(browser, console, "/ui/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("made-in-the-console")
    partitions = form.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("2")
    form.find_element(By.NAME, "retention_ms").send_keys("3600000")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, 10).until(lambda b: b.current_url.endswith("/ui/topics/made-in-the-console"))
    described = console.api("/v1/topics/made-in-the-console")
    assert described["partitions"] == 2 and described["configs"]["retention.ms"] == "3600000"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2
    assert _errors(browser) == []


def test_topic_configs_are_editable(browser: Any, console: Console) -> None:
    _open(browser, console, "/ui/topics/sensor-readings")
    form = browser.find_element(By.CSS_SELECTOR, 'tr[data-config="retention.ms"] form')
    field = form.find_element(By.NAME, "value")
    field.clear()
    field.send_keys("7200000")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, 10).until(lambda b: "Set retention.ms = 7200000" in _text(b, "#configs"))
    assert console.api("/v1/topics/sensor-readings")["configs"]["retention.ms"] == "7200000"
    assert _errors(browser) == []


def test_produce_form_writes_a_record(browser: Any, console: Console) -> None:
    _open(browser, console, "/ui/topics/sensor-readings")
    value = f"from the form {uuid.uuid4().hex[:8]}"
    form = browser.find_element(By.ID, "produce")
    form.find_element(By.NAME, "key").send_keys("sensor-7")
    form.find_element(By.NAME, "value").send_keys(value)
    form.find_element(By.NAME, "headers").send_keys("unit=celsius")
    Select(form.find_element(By.NAME, "partition")).select_by_value("0")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, 10).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".produced-offset")))
    offset = int(_text(browser, ".produced-offset"))
    fetched = console.api(f"/v1/topics/sensor-readings/partitions/0/records?offset={offset}&encoding=string")
    record = fetched["records"][0]
    assert (record["key"], record["value"]) == ("sensor-7", value)
    assert record["headers"] == [{"key": "unit", "value": "celsius"}]
    assert _errors(browser) == []


def test_message_browser_shows_records_as_json_hex_and_filtered_by_key(
    browser: Any, console: Console
) -> None:
    fetched = console.api("/v1/topics/orders/partitions/1/records?offset=0&max_records=5&encoding=string")
    first = fetched["records"][0]
    _open(browser, console, "/ui/topics/orders/messages?partition=1&from=offset&offset=0&format=json&limit=5")
    cards = browser.find_elements(By.CSS_SELECTOR, "#records .record")
    assert [int(c.get_attribute("data-offset")) for c in cards] == [r["offset"] for r in fetched["records"]]
    assert first["key"] in cards[0].text and '"order":' in cards[0].text  # pretty JSON
    assert "source = " in cards[0].text  # headers

    _open(browser, console, "/ui/topics/sensor-readings/messages?from=offset&offset=0&format=hex&limit=1")
    assert "00 01 02 03 04 05 06 07" in _text(browser, "#records .record pre")

    _open(browser, console, "/ui/topics/orders/messages?key=customer-3&limit=100")
    keys = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#records .record code.k")]
    assert keys and set(keys) == {"customer-3"}
    _open(browser, console, PAGES["messages"])
    _screenshot(browser, "messages")
    assert _errors(browser) == []


def test_live_tail_shows_a_record_produced_during_the_test(browser: Any, console: Console) -> None:
    _open(browser, console, "/ui/topics/orders/messages?from=tail")
    marker = f"tail-{uuid.uuid4().hex[:10]}"
    console.gw.client.post(
        "/v1/topics/orders/records", json={"records": [{"key": "live", "value": {"marker": marker}}]}
    ).raise_for_status()
    _wait(browser, 15).until(lambda b: marker in _text(b, "#records"))
    assert _errors(browser) == []


def test_groups_pages_show_state_lag_and_committed_offsets(browser: Any, console: Console) -> None:
    _open(browser, console, "/ui/groups")
    for name in ("billing", "shipping"):
        lag = console.api(f"/v1/groups/{name}/lag")["total_lag"]
        row = _cells(browser, f'#groups tr[data-group="{name}"]')
        assert row[4].split()[0] == f"{lag:,}", name
    assert _cells(browser, '#groups tr[data-group="shipping"]')[2] == "1"
    _screenshot(browser, "groups")

    _open(browser, console, "/ui/groups/billing")
    lag = console.api("/v1/groups/billing/lag")
    for p in lag["partitions"]:
        cells = _cells(browser, f'#lag tr[data-tp="orders:{p["partition"]}"]')
        assert cells[2] == str(p["committed_offset"]) and cells[5].rstrip("*") == f"{p['lag']:,}"
    _wait(browser, 10).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".chart[data-drawn]")))
    _screenshot(browser, "group")
    assert _errors(browser) == []


def test_group_reset_from_the_form_changes_the_committed_offsets(browser: Any, console: Console) -> None:
    before = {o["partition"]: o["offset"] for o in console.api("/v1/groups/billing/offsets")["offsets"]}
    _open(browser, console, "/ui/groups/billing")
    form = browser.find_element(By.ID, "reset")
    Select(form.find_element(By.NAME, "to")).select_by_value("offset")
    form.find_element(By.NAME, "value").send_keys("10")
    Select(form.find_element(By.NAME, "topic")).select_by_value("orders")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, 10).until(ec.presence_of_element_located((By.ID, "reset-apply")))
    assert "Dry run" in _text(browser, "#reset-status")
    plan = browser.find_elements(By.CSS_SELECTOR, "#reset-plan tbody tr")
    assert len(plan) == 3 and all(r.find_elements(By.TAG_NAME, "td")[3].text == "10" for r in plan)
    after_dry_run = {
        o["partition"]: o["offset"] for o in console.api("/v1/groups/billing/offsets")["offsets"]
    }
    assert after_dry_run == before  # a dry run changes nothing

    browser.find_element(By.CSS_SELECTOR, "#reset-apply button").click()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = {o["partition"]: o["offset"] for o in console.api("/v1/groups/billing/offsets")["offsets"]}
        if now == {0: 10, 1: 10, 2: 10}:
            break
        time.sleep(0.1)
    assert now == {0: 10, 1: 10, 2: 10}
    _wait(browser, 10).until(lambda b: _cells(b, '#lag tr[data-tp="orders:0"]')[2] == "10")  # reloaded
    assert _errors(browser) == []


def test_jobs_page_shows_the_jobs_of_every_topic_with_the_commands(browser: Any, console: Console) -> None:
    deadline = time.monotonic() + 15
    while True:  # the broker's maintenance compacts orders (4 small files per partition) and vacuums
        _open(browser, console, "/ui/jobs")
        cells = _cells(browser, '#jobs tr[data-topic="orders"]')
        if ("not seen" not in cells[1] and "not seen" not in cells[4]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "not seen" not in cells[1], cells  # compaction, with its time
    assert "not seen" not in cells[4], cells  # VACUUM
    for t in console.api("/v1/topics")["topics"]:
        assert browser.find_elements(By.CSS_SELECTOR, f'#jobs tr[data-topic="{t["name"]}"]')
    commands = browser.execute_script(
        "return Array.from(document.querySelectorAll('code.cmd')).map(e => e.textContent)"
    )
    assert any(
        c.startswith("topiclake jobs compact --warehouse ") and c.endswith("--topic orders") for c in commands
    )
    _screenshot(browser, "jobs")
    assert _errors(browser) == []


def test_a_group_is_deleted_from_its_page(browser: Any, console: Console) -> None:
    offsets = [{"topic": "orders", "partition": 0, "offset": 1}]
    console.gw.client.post("/v1/groups/short-lived/offsets", json={"offsets": offsets}).raise_for_status()
    _open(browser, console, "/ui/groups/short-lived")
    browser.find_element(By.CSS_SELECTOR, "#delete button").click()
    _wait(browser, 5).until(ec.alert_is_present()).accept()  # "Delete group ...?"
    _wait(browser, 10).until(lambda b: b.current_url.endswith("/ui/groups"))
    assert not browser.find_elements(By.CSS_SELECTOR, '#groups tr[data-group="short-lived"]')
    gone = console.gw.client.get("/v1/groups/short-lived/offsets")
    assert gone.status_code == 404 or gone.json()["offsets"] == []
    assert _errors(browser) == []
