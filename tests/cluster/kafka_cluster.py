"""Three real ``topiclake serve`` brokers over one warehouse, each with its own Kafka listener on 127.0.0.1,
heartbeat and session shortened as the platform's cluster tests do (imported by name from this folder)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
from broker_harness import BrokerProcess, wait_for
from deltalake import DeltaTable

from topiclake.process.ports import free_port

#: Shorter than the defaults so that a failover takes seconds (as tests/platform/cluster/cluster_procs.py).
FAST_ENV = {
    "TOPICLAKE_BROKER__HEARTBEAT_INTERVAL_MS": "250",
    "TOPICLAKE_BROKER__SESSION_TIMEOUT_MS": "2500",
    "TOPICLAKE_BROKER__LEADER_REBALANCE_DELAY_MS": "1000",
    "TOPICLAKE_BROKER__LINGER_MS": "1",
    "TOPICLAKE_BROKER__CONSUMER_GROUP_SESSION_TIMEOUT_MS": "6000",
    "TOPICLAKE_BROKER__CONSUMER_GROUP_HEARTBEAT_INTERVAL_MS": "500",
}


@dataclass
class KafkaBroker:
    """One broker process and its Kafka port."""

    proc: BrokerProcess
    kafka_port: int

    @property
    def broker_id(self) -> int:
        return self.proc.broker_id

    @property
    def bootstrap(self) -> str:
        """This broker alone as a Kafka bootstrap list."""
        return f"127.0.0.1:{self.kafka_port}"


def start_kafka_brokers(
    warehouse: Path | str,
    logs: Path,
    count: int,
    racks: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> list[KafkaBroker]:
    """Start ``count`` brokers (ids 1..count) at once; return when each answers and all see each other.
    ``racks``: broker i's ``--rack`` is ``racks[i - 1]``; ``env``: what reaches an ``s3://`` warehouse
    (conftest.py's ``shared_warehouse``).

    The caller stops them (``b.proc.stop()``), also when this raises: every started process is in the list
    handed to ``started`` before waiting.
    """
    ports = [free_port() for _ in range(2 * count)]  # distinct: free_port never repeats one
    brokers = []
    for i in range(1, count + 1):
        http, kafka = ports[2 * i - 2], ports[2 * i - 1]
        extra = ["--kafka-port", str(kafka)] + (["--rack", racks[i - 1]] if racks else [])
        proc = BrokerProcess(warehouse, i, logs / f"broker-{i}.log", port=http, extra=extra, env=env)
        brokers.append(KafkaBroker(proc, kafka))
    errors: list[BaseException] = []

    def start(b: KafkaBroker) -> None:
        try:
            b.proc.start()
        except BaseException as exc:  # reported below, after every thread is done
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        for b in brokers:
            b.proc.stop()
        raise errors[0]

    def all_listed() -> bool:
        doc = httpx.get(f"{brokers[0].proc.url}/v1/metadata", timeout=5).json()
        return len(doc["brokers"]) == count

    wait_for(all_listed, 30, f"{count} brokers in the metadata")
    wait_for(lambda: kafka_sees(brokers[0], count), 30, f"{count} brokers in the Kafka metadata")
    return brokers


def kafka_sees(broker: KafkaBroker, count: int) -> bool:
    """A Kafka client bootstrapped from ``broker`` sees ``count`` brokers and a controller among them."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    return len(md.brokers) == count and md.controller_id in md.brokers


def leaders(broker: KafkaBroker, topic: str) -> dict[int, int]:
    """Partition -> leader id, from the broker's HTTP metadata."""
    doc = httpx.get(f"{broker.proc.url}/v1/metadata", timeout=5).json()
    for t in doc["topics"]:
        if t["name"] == topic:
            return {p["partition"]: p["leader"] for p in t["partitions"]}
    return {}


def table_rows(
    warehouse: Path | str, topic: str, options: dict[str, str] | None = None
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row of the topic's Delta table (``options``: the storage options
    of an ``s3://`` warehouse)."""
    dt = DeltaTable(f"{str(warehouse).rstrip('/')}/topics/{topic}", storage_options=options or None)
    t = dt.to_pyarrow_table(columns=["partition", "offset", "value"])
    return [(int(r["partition"]), int(r["offset"]), bytes(r["value"])) for r in t.to_pylist()]


def find_coordinator(broker: KafkaBroker, group: str) -> int:
    """The node id a raw FindCoordinator v1 request to ``broker`` answers for ``group``."""
    import io
    import socket
    import struct

    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer

    from topiclake.kafka.codec import build

    req_cls = load_request_schema(10, 1)
    header_cls = req_cls.__header_schema__
    header = {"request_api_key": 10, "request_api_version": 1, "correlation_id": 1, "client_id": "t"}
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, header))
    entity_writer(req_cls)(buf, build(req_cls, {"key": group, "key_type": 0}))
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
    resp_cls = load_response_schema(10, 1)
    _h, n = entity_reader(resp_cls.__header_schema__)(data, 4)
    body = entity_reader(resp_cls)(data, 4 + n)[0]
    assert body.error_code == 0, body
    return int(body.node_id)
