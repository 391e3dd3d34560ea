"""A 2-broker cluster (``topiclake serve`` subprocesses) under mTLS: a broker forwards produce and fetch to
each partition's leader, and group requests to the coordinator, over https with its own certificate."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))

from broker_harness import BrokerProcess, wait_for
from tls_harness import Certs, make_certs

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


class TlsBroker(BrokerProcess):
    """A broker process whose HTTP listener speaks mTLS."""

    def __init__(self, warehouse: Path, broker_id: int, log: Path, certs: Certs) -> None:
        extra = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
        extra += ["--tls-ca", str(certs.ca)]
        super().__init__(warehouse, broker_id, log, extra=extra)
        self.url = f"https://127.0.0.1:{self.port}"
        cert, key = certs.client(f"test-{broker_id}")
        self.tls = ssl.create_default_context(cafile=str(certs.ca))
        self.tls.load_cert_chain(str(cert), str(key))

    def start(self, wait: float = 60.0) -> TlsBroker:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        deadline = time.monotonic() + wait
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", verify=self.tls, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker {self.broker_id} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[TlsBroker]]:
    certs = make_certs(tmp_path / "pki")
    started: list[TlsBroker] = []
    try:
        for i in (1, 2):
            started.append(TlsBroker(tmp_path / "wh", i, tmp_path / f"b{i}.log", certs).start())
        yield started
    finally:
        for b in started:
            b.stop()


def _leaders(client: httpx.Client, topic: str) -> dict[int, int]:
    for t in client.get("/v1/metadata").json()["topics"]:
        if t["name"] == topic:
            return {p["partition"]: p["leader"] for p in t["partitions"]}
    return {}


def test_forwarding_and_group_routing_over_mtls(brokers: list[TlsBroker]) -> None:
    one, two = brokers
    with (
        httpx.Client(base_url=one.url, verify=one.tls, timeout=30) as c1,
        httpx.Client(base_url=two.url, verify=two.tls, timeout=30) as c2,
    ):
        wait_for(lambda: len(c1.get("/v1/metadata").json()["brokers"]) == 2, 30, "2 brokers")
        assert c1.post("/v1/topics", json={"name": "orders", "partitions": 4}).status_code == 201
        wait_for(lambda: set(_leaders(c2, "orders").values()) == {1, 2}, 30, "leaders on both brokers")
        for p in range(4):  # through broker 1: half of it is forwarded to broker 2 over https
            r = c1.post(
                "/v1/topics/orders/records", params={"partition": p}, json={"records": [{"value": f"v{p}"}]}
            )
            assert r.status_code == 200, r.text
        for p in range(4):  # and read back through broker 2 (forwarded the other way)
            got = c2.get(f"/v1/topics/orders/partitions/{p}/records", params={"offset": 0})
            assert got.status_code == 200, got.text
            assert got.json()["high_watermark"] == 1
        # a group request sent to either broker reaches the one coordinator (proxied over https)
        for client, offset in ((c1, 0), (c2, 1)):
            body = {"offsets": [{"topic": "orders", "partition": 0, "offset": offset}]}
            r = client.post("/v1/groups/billing/offsets", json=body)
            assert r.status_code == 200, r.text
        for client in (c1, c2):
            offsets = client.get("/v1/groups/billing/offsets").json()["offsets"]
            assert [o["offset"] for o in offsets] == [1]
