"""The client with ``bootstrap_servers`` against real ``topiclake serve`` brokers (today a cluster of one):
metadata from any broker that answers, Kafka's partitioner on the client, leaders, retries, idempotence."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import BrokerProcess, bootstrap
from deltalake import DeltaTable

from topiclake.client import ClusterView, GatewayUnavailable, TopiclakeClient, parse_bootstrap_servers
from topiclake.errors import InvalidRequest, TopicNotFound
from topiclake.platform import partition_for_key
from topiclake.process.ports import free_port


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (``module_broker``, today's one-broker cluster) for its seven tests that use
    topics and a client of their own."""
    return module_broker


def table_rows(warehouse: Path, topic: str) -> list[dict[str, object]]:
    """The topic's rows read with delta-rs, by partition and offset."""
    rows = DeltaTable(str(warehouse / "topics" / topic)).to_pyarrow_table(
        columns=["partition", "offset", "value"]
    )
    return sorted(rows.to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1, b:2,a:1") == ["http://a:1", "http://b:2"]
    assert parse_bootstrap_servers(["h:9", "https://x:443/"]) == ["http://h:9", "https://x:443"]
    assert parse_bootstrap_servers("broker") == ["http://broker:8082"]
    for bad in ("", " , ", "h:port", "h:0", ":80"):
        with pytest.raises(InvalidRequest):
            parse_bootstrap_servers(bad)


def test_metadata_from_any_broker_that_answers(broker: BrokerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with TopiclakeClient(bootstrap_servers=f"{dead},{broker.address}", timeout=10) as tl:
        tl.create_topic("orders", partitions=3)
        meta = tl.metadata()
        assert meta["controller_id"] == 1
        assert [(b["id"], b["host"], b["port"]) for b in meta["brokers"]] == [(1, "127.0.0.1", broker.port)]
        (topic,) = (t for t in meta["topics"] if t["name"] == "orders")
        assert [p["leader"] for p in topic["partitions"]] == [1, 1, 1]
        assert tl.bootstrap_servers == [f"http://{dead}", broker.url]
        # the broker that answered is asked first from now on
        assert tl._router is not None and tl._router.preferred == broker.url


def test_no_broker_answers_is_gateway_unavailable(tmp_path: Path) -> None:
    servers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
    with TopiclakeClient(bootstrap_servers=servers, timeout=2, delivery_timeout=1.0) as tl:
        started = time.monotonic()
        with pytest.raises(GatewayUnavailable) as info:
            tl.produce("t", [{"value": 1}])
        assert "no broker of the cluster answered" in info.value.message
        assert time.monotonic() - started < 10
        with pytest.raises(GatewayUnavailable):
            tl.list_topics()


def test_produce_partitions_keys_like_kafka_and_fetches_from_the_leader(broker: BrokerProcess) -> None:
    with TopiclakeClient(bootstrap_servers=broker.address, timeout=10) as tl:
        tl.create_topic("keyed", partitions=4)
        records = [{"key": f"customer-{i}", "value": {"n": i}} for i in range(40)]
        records.append({"key": "pinned", "value": {"n": 40}, "partition": 3})
        res = tl.produce("keyed", records)["results"]
        assert all(r["error"] is None for r in res)
        for rec, r in zip(records[:40], res, strict=False):
            assert r["partition"] == partition_for_key(str(rec["key"]).encode(), 4)
        assert res[40]["partition"] == 3
        seen = {}
        for p in range(4):
            batch = tl.fetch("keyed", p, 0, encoding="json")
            for f in batch["records"]:
                seen[f["value"]["n"]] = (p, f["offset"])
            assert tl.offsets("keyed", p)["end_offset"] == len(batch["records"])
        assert {n: seen[n] for n in range(41)} == {
            n: (r["partition"], r["offset"]) for n, r in enumerate(res)
        }
        # keyless records spread over the partitions, results still in request order
        res = tl.produce("keyed", [{"value": i} for i in range(8)], encoding="json")["results"]
        assert sorted({r["partition"] for r in res}) == [0, 1, 2, 3]
        # one producer id per partition written, sequences advanced by the records of each
        assert tl._producer is not None
        slots = tl._producer.sequences._slots
        assert sorted(p for (t, p) in slots if t == "keyed") == [0, 1, 2, 3]
        assert sum(s.next_sequence for s in slots.values()) == 49
        assert len({s.producer["producer_id"] for s in slots.values() if s.producer}) == 4


def test_idempotent_retry_is_answered_with_the_original_offsets(broker: BrokerProcess) -> None:
    with TopiclakeClient(bootstrap_servers=broker.address, timeout=10) as tl:
        tl.create_topic("idem", partitions=2)
        first = tl.produce("idem", [{"value": i, "partition": 1} for i in range(5)])["results"]
        assert tl._producer is not None
        slot = tl._producer.sequences.slot("idem", 1)
        assert slot.producer is not None and slot.next_sequence == 5
        # the same request again, as a retry after a lost answer would send it
        producer = {"id": slot.producer["producer_id"], "epoch": slot.producer["epoch"], "sequence": 0}
        again = tl.produce("idem", [{"value": i} for i in range(5)], partition=1, producer=producer)[
            "results"
        ]
        assert [r["offset"] for r in again] == [r["offset"] for r in first] == [0, 1, 2, 3, 4]
        tl.produce("idem", [{"value": 5, "partition": 1}])
    rows = table_rows(Path(broker.warehouse), "idem")
    assert [(r["partition"], r["offset"]) for r in rows] == [(1, i) for i in range(6)]


def test_idempotence_needs_acks_all(broker: BrokerProcess) -> None:
    with TopiclakeClient(bootstrap_servers=broker.address, idempotent=True) as tl:
        tl.create_topic("acks", partitions=1)
        with pytest.raises(InvalidRequest):
            tl.produce("acks", [{"value": 1}], acks="1")
    with TopiclakeClient(bootstrap_servers=broker.address) as tl:  # default: idempotent only for acks=all
        assert tl.produce("acks", [{"value": 1}], acks="1")["results"][0]["error"] is None


def test_unknown_topic_fails_fast(broker: BrokerProcess) -> None:
    with TopiclakeClient(bootstrap_servers=broker.address, timeout=5, delivery_timeout=30) as tl:
        started = time.monotonic()
        with pytest.raises(TopicNotFound):
            tl.produce("nope", [{"value": 1}])
        assert time.monotonic() - started < 10


def test_stale_leader_is_refreshed_and_retried(broker: BrokerProcess) -> None:
    """A view that names a leader at an address no broker listens on: produce and fetch read the metadata
    again and go to the real leader."""
    with TopiclakeClient(bootstrap_servers=broker.address, timeout=5, retry_backoff=0.05) as tl:
        tl.create_topic("moved", partitions=2)
        router = tl._router
        assert router is not None
        real = router.refresh()
        gone = f"http://127.0.0.1:{free_port()}"
        router._view = ClusterView(real.doc, real.source, {1: gone}, real.leaders)
        assert router.view().leader_url("moved", 0) == gone
        res = tl.produce("moved", [{"value": 1, "partition": 0}])["results"]
        assert res[0]["error"] is None and res[0]["offset"] == 0
        assert router.view().leader_url("moved", 0) == broker.url
        router._view = ClusterView(real.doc, real.source, {1: gone}, real.leaders)
        assert len(tl.fetch("moved", 0, 0)["records"]) == 1


def test_producing_survives_a_kill9_and_restart_of_the_broker(
    start_brokers: Callable[..., list[BrokerProcess]], tmp_path: Path
) -> None:
    """The only broker is killed -9 and started again: the client retries until it is back; every
    acknowledged record is in the table exactly once and offsets stay contiguous."""
    (b,) = start_brokers(1)
    acked: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    with TopiclakeClient(bootstrap_servers=b.address, timeout=5, delivery_timeout=60) as tl:
        tl.create_topic("survive", partitions=2)

        def produce() -> None:
            n = 0
            while not stop.is_set() and n < 5000:
                batch = [{"key": f"k{n + i}", "value": n + i} for i in range(10)]
                try:
                    res = tl.produce("survive", batch)["results"]
                except Exception as exc:
                    failures.append(exc)
                    return
                acked.extend(
                    r_value for r_value, r in zip(range(n, n + 10), res, strict=True) if r["error"] is None
                )
                n += 10

        t = threading.Thread(target=produce)
        t.start()
        deadline = time.monotonic() + 20
        while len(acked) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        b.kill9()
        killed_at, before = time.monotonic(), len(acked)
        b.start()
        while len(acked) <= before + 20 and time.monotonic() - killed_at < 30:
            time.sleep(0.05)
        resumed = time.monotonic() - killed_at
        stop.set()
        t.join(60)
    assert not failures, failures
    assert len(acked) > before + 20, "producing did not resume"
    assert resumed < 30
    rows = table_rows(tmp_path / "wh", "survive")
    values = [int(r["value"]) for r in rows]
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(acked) <= set(values)
    for p in (0, 1):
        offsets = [int(r["offset"]) for r in rows if r["partition"] == p]
        assert offsets == list(range(len(offsets)))


def test_bootstrap_list_of_several_brokers_string(start_brokers: Callable[..., list[BrokerProcess]]) -> None:
    brokers = start_brokers(1)
    assert bootstrap(brokers) == brokers[0].address


def test_not_leader_answer_refreshes_metadata_and_goes_to_the_new_leader(broker: BrokerProcess) -> None:
    """A former leader (a real HTTP server) answers 421 not_leader, as a deposed broker does: the client
    reads the metadata again and produces to the real leader, once."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    hits: list[str] = []

    async def not_leader(request: Request) -> JSONResponse:
        hits.append(request.url.path)
        error = {"code": "not_leader", "message": "not the leader", "retriable": True}
        return JSONResponse({"error": {**error, "details": {"leader_id": 1}}}, status_code=421)

    app = Starlette(routes=[Route("/{path:path}", not_leader, methods=["GET", "POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        with TopiclakeClient(bootstrap_servers=broker.address, timeout=5, retry_backoff=0.05) as tl:
            tl.create_topic("deposed", partitions=2)
            router = tl._router
            assert router is not None
            real = router.refresh()
            stale = {**real.brokers, 9: f"http://127.0.0.1:{port}"}
            router._view = ClusterView(real.doc, real.source, stale, {"deposed": (9, 9)})
            res = tl.produce("deposed", [{"value": i, "partition": i % 2} for i in range(4)])["results"]
            assert all(r["error"] is None for r in res)
            assert hits, "the stale leader was not asked"
            assert router.view().leader_url("deposed", 0) == broker.url
            for p in (0, 1):
                assert [r["value"] for r in tl.fetch("deposed", p, 0, encoding="json")["records"]] == [
                    p,
                    p + 2,
                ]
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_new_client_waits_for_a_broker_within_the_delivery_timeout(
    start_brokers: Callable[..., list[BrokerProcess]],
) -> None:
    """No broker answers when the produce call starts; one comes up within the delivery timeout."""
    (b,) = start_brokers(1)
    with TopiclakeClient(b.url) as tl:
        tl.create_topic("later", partitions=1)
    b.stop()
    restarter = threading.Timer(1.0, b.start)
    restarter.start()
    try:
        with TopiclakeClient(bootstrap_servers=b.address, timeout=5, delivery_timeout=60) as tl:
            res = tl.produce("later", [{"value": 1}])["results"]
        assert res[0]["error"] is None and res[0]["offset"] == 0
    finally:
        restarter.join(60)
