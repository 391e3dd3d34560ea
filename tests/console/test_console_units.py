"""The console's parts without a browser: rendering of values, the sampler's series, the Delta side, and a
console whose browser libraries are missing."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from topiclake.console import register_decoder
from topiclake.console.render import formats, show
from topiclake.console.sampler import Sampler
from topiclake.platform import Broker, BrokerConfig, Record, Storage
from topiclake.platform.log.table_info import classify, describe_table


def test_show_renders_text_pretty_json_hex_and_falls_back() -> None:
    assert show(b'{"a":1}', "json") == ('{\n  "a": 1\n}', "json")
    assert show(b"plain", "json") == ("plain", "text")
    assert show(b"\xff\x00", "text") == ("ff 00", "hex")
    assert show(bytes(range(18)), "hex")[0].splitlines()[1] == "10 11"
    assert show(None, "text") == ("null", "null")


def test_a_registered_decoder_is_offered_and_used() -> None:
    register_decoder("reversed", lambda topic, is_key, data: data.decode()[::-1])
    assert "reversed" in formats()
    assert show(b"abc", "reversed", "t") == ("cba", "reversed")


def test_classify_tells_job_commits_from_appends() -> None:
    assert classify({"operation": "WRITE"}) is None
    assert classify({"operation": "WRITE", "topiclake.operation": "compaction"}) == ("compaction", "broker")
    assert classify({"operation": "WRITE", "userMetadata": "topiclake:compact-keys:ab"}) == (
        "key-compaction",
        "spark",
    )
    assert classify({"operation": "DELETE", "userMetadata": "topiclake:retention:ab"}) == (
        "retention",
        "spark",
    )
    assert classify({"operation": "VACUUM END"}) == ("vacuum", "delta")


def test_sampler_turns_counters_into_rates_and_lag_series(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    produced = Counter("p", "p", ["topic"], registry=registry)
    fetched = Counter("f", "f", ["topic"], registry=registry)
    with Broker(Storage(str(tmp_path)), BrokerConfig(linger_ms=1, maintenance=False)) as broker:
        broker.create_topic("t", partitions=2)
        broker.produce("t", [Record(value=b"x", partition=0)] * 10)
        broker.groups.commit("g", None, -1, {("t", 0): 2})
        sampler = Sampler(broker, produced, fetched, interval_s=60)
        now = time.time()
        sampler.sample(now)
        produced.labels("t").inc(50)
        broker.produce("t", [Record(value=b"y", partition=0)] * 5)
        sampler.sample(now + 10)
        assert sampler.series("produce:t")[-1][1] == 5.0  # 50 records in 10 s
        assert sampler.series("produce:*")[-1][1] == 5.0
        assert [v for _, v in sampler.series("lag:g")] == [8.0, 13.0]
        assert [v for _, v in sampler.series("lag:g:t:0")] == [8.0, 13.0]
        assert sampler.growing_lag(["g"], samples=2) == ["g"]
        table = describe_table(broker.storage, "t")
        assert table.partitions[0].records == 15 and table.files >= 2 and table.version >= 2


@pytest.fixture
def bare_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
    from gateway_harness import start_gateway, stop_gateway

    monkeypatch.setenv("TOPICLAKE_CONSOLE_VENDOR", str(tmp_path / "nothing-installed"))
    gw, server, thread = start_gateway(tmp_path / "lake")
    try:
        yield gw
    finally:
        stop_gateway(gw, server, thread)


def test_console_without_its_libraries_says_so_and_still_serves_pages(bare_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = bare_gateway
    gw.client.post("/v1/topics", json={"name": "t"}).raise_for_status()
    for path in ("/ui", "/ui/topics", "/ui/topics/t", "/ui/topics/t/messages", "/ui/groups", "/ui/jobs"):
        page = gw.client.get(path)
        assert page.status_code == 200, path
        assert "scripts are not installed" in page.text, path
        assert "/ui/vendor/" not in page.text, path  # nothing that would 404 in the browser
    assert httpx.get(f"{gw.url}/ui/vendor/htmx.min.js").status_code == 404
    hostile = {"key": "<b>k</b>", "value": "<script>alert(1)</script>"}
    gw.client.post("/v1/topics/t/records?encoding=string", json={"records": [hostile]}).raise_for_status()
    shown = gw.client.get("/ui/topics/t/messages").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<script>alert" not in shown  # escaped
    assert gw.client.get("/healthz").status_code == 200
