# ruff: noqa: E501  (the table of cases reads best one API a row)
"""Every API the Kafka listener serves, on the wire: a logged-in user without ACLs gets the API's
*_AUTHORIZATION_FAILED where Kafka puts it (or a filtered listing), a super user never does."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tls_harness import Running, start

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))
from kafka_harness import frame, read_frame, response

from topiclake.security import UserStore

TOPIC, GROUP = 29, 30
CLUSTER = 31
TXN = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
X = "matrix-tid"
_TXN_IDS = {"transactional_id": X, "producer_id": 1, "producer_epoch": 0}
T = "matrix"
G = "matrix-group"
_PARTS = [{"partition_index": 0}]

#: (api key, version, request body, where the error is in the answer, the expected refusal)
CASES: list[tuple[str, int, int, dict[str, Any], Callable[[Any], Any], Any]] = [
    ("Produce", 0, 9, {"acks": -1, "timeout": 1000, "topic_data": [{"name": T, "partition_data": [{"index": 0, "records": b""}]}]},
     lambda r: r.responses[0].partition_responses[0].error_code, TOPIC),
    ("Fetch", 1, 12, {"replica_id": -1, "max_wait": 0, "max_bytes": 1 << 20, "session_epoch": -1,
                      "topics": [{"topic": T, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]},
     lambda r: r.responses[0].partitions[0].error_code, TOPIC),
    ("ListOffsets", 2, 7, {"replica_id": -1, "topics": [{"name": T, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
     lambda r: r.topics[0].partitions[0].error_code, TOPIC),
    ("Metadata named", 3, 12, {"topics": [{"name": T}]}, lambda r: r.topics[0].error_code, TOPIC),
    ("Metadata listing", 3, 12, {"topics": None}, lambda r: [t.name for t in r.topics], []),
    ("OffsetCommit", 8, 8, {"group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
                            "topics": [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]},
     lambda r: r.topics[0].partitions[0].error_code, GROUP),
    ("OffsetFetch", 9, 7, {"group_id": G, "topics": None}, lambda r: r.error_code, GROUP),
    ("FindCoordinator", 10, 3, {"key": G, "key_type": 0}, lambda r: r.error_code, GROUP),
    ("JoinGroup", 11, 7, {"group_id": G, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                          "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
     lambda r: r.error_code, GROUP),
    ("Heartbeat", 12, 4, {"group_id": G, "generation_id": 1, "member_id": "m"}, lambda r: r.error_code, GROUP),
    ("LeaveGroup", 13, 4, {"group_id": G, "members": [{"member_id": "m"}]}, lambda r: r.error_code, GROUP),
    ("SyncGroup", 14, 5, {"group_id": G, "generation_id": 1, "member_id": "m", "assignments": []},
     lambda r: r.error_code, GROUP),
    ("DescribeGroups", 15, 5, {"groups": [G]}, lambda r: r.groups[0].error_code, GROUP),
    ("ListGroups", 16, 4, {"states_filter": []}, lambda r: [g.group_id for g in r.groups], []),
    ("CreateTopics", 19, 7, {"topics": [{"name": "new-one", "num_partitions": 1, "replication_factor": 1}], "timeout": 5000},
     lambda r: r.topics[0].error_code, TOPIC),
    ("DeleteTopics", 20, 6, {"topics": [{"name": T}], "timeout": 5000}, lambda r: r.responses[0].error_code, TOPIC),
    ("InitProducerId", 22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
     lambda r: r.error_code, CLUSTER),
    ("DescribeAcls", 29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1},
     lambda r: r.error_code, CLUSTER),
    ("CreateAcls", 30, 3, {"creations": [{"resource_type": 2, "resource_name": T, "resource_pattern_type": 3,
                                          "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}]},
     lambda r: r.results[0].error_code, CLUSTER),
    ("DeleteAcls", 31, 3, {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}]},
     lambda r: r.filter_results[0].error_code, CLUSTER),
    ("DescribeConfigs topic", 32, 4, {"resources": [{"resource_type": 2, "resource_name": T, "configuration_keys": None}]},
     lambda r: r.results[0].error_code, TOPIC),
    ("DescribeConfigs broker", 32, 4, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]},
     lambda r: r.results[0].error_code, CLUSTER),
    ("AlterConfigs", 33, 2, {"resources": [{"resource_type": 2, "resource_name": T, "configs": []}]},
     lambda r: r.responses[0].error_code, TOPIC),
    ("CreatePartitions", 37, 3, {"topics": [{"name": T, "count": 3, "assignments": None}], "timeout": 5000},
     lambda r: r.results[0].error_code, TOPIC),
    ("DeleteGroups", 42, 2, {"groups_names": [G]}, lambda r: r.results[0].error_code, GROUP),
    ("IncrementalAlterConfigs", 44, 1, {"resources": [{"resource_type": 2, "resource_name": T, "configs": []}]},
     lambda r: r.responses[0].error_code, TOPIC),
    ("OffsetDelete", 47, 0, {"group_id": G, "topics": [{"name": T, "partitions": _PARTS}]}, lambda r: r.error_code, GROUP),
    ("Produce transactional", 0, 9, {"transactional_id": X, "acks": -1, "timeout": 1000, "topic_data": [{"name": T, "partition_data": [{"index": 0, "records": b""}]}]},
     lambda r: r.responses[0].partition_responses[0].error_code, TXN),
    ("FindCoordinator transaction", 10, 3, {"key": X, "key_type": 1}, lambda r: r.error_code, TXN),
    ("InitProducerId transactional", 22, 4, {"transactional_id": X, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
     lambda r: r.error_code, TXN),
    ("AddPartitionsToTxn", 24, 3, {"v3_and_below_transactional_id": X, "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
                                   "v3_and_below_topics": [{"name": T, "partitions": [0]}]},
     lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, TXN),
    ("AddOffsetsToTxn", 25, 3, {**_TXN_IDS, "group_id": G}, lambda r: r.error_code, TXN),
    ("EndTxn", 26, 3, {**_TXN_IDS, "committed": True}, lambda r: r.error_code, TXN),
    ("TxnOffsetCommit", 28, 3, {**_TXN_IDS, "group_id": G, "generation_id": -1, "member_id": "", "group_instance_id": None,
                                "topics": [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
     lambda r: r.topics[0].partitions[0].error_code, TXN),
    ("DescribeTransactions", 65, 0, {"transactional_ids": [X]}, lambda r: r.transaction_states[0].error_code, TXN),
    ("WriteTxnMarkers", 27, 1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                                             "topics": [{"name": T, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
     lambda r: r.markers[0].topics[0].partitions[0].error_code, CLUSTER),
    ("DescribeProducers", 61, 0, {"topics": [{"name": T, "partition_indexes": [0]}]},
     lambda r: r.topics[0].partitions[0].error_code, TOPIC),
    ("ConsumerGroupHeartbeat", 68, 1, {"group_id": "g848", "member_id": "m848", "member_epoch": 0, "rebalance_timeout": 30000,
                                       "subscribed_topic_names": [T], "topic_partitions": []},
     lambda r: r.error_code, GROUP),
    ("ConsumerGroupDescribe", 69, 1, {"group_ids": [G]}, lambda r: r.groups[0].error_code, GROUP),
]  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("matrix")
    store = UserStore(folder / "users")
    store.add("alice", "alice-secret")
    store.add("admin", "admin-secret")
    running = start(
        folder / "wh",
        auth=True,
        users_file=str(folder / "users"),
        super_users=["User:admin"],
        kafka_sasl_mechanisms="PLAIN",
    )
    try:
        running.broker.create_topic(T, 1)
        running.broker.groups.commit(G, None, -1, {(T, 0): (0, None)}, foreign_ok=True)
        yield running
    finally:
        running.stop()


def _session(running: Running, user: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", running.kafka_port), timeout=10)
    sock.sendall(frame(17, 1, {"mechanism": "PLAIN"}))
    assert int(response(17, 1, read_frame(sock)).error_code) == 0
    sock.sendall(frame(36, 2, {"auth_bytes": f"\0{user}\0{user}-secret".encode()}))
    assert int(response(36, 2, read_frame(sock)).error_code) == 0
    return sock


def _ask(sock: socket.socket, key: int, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(frame(key, version, body))
    return response(key, version, read_frame(sock))


@pytest.mark.parametrize(
    ("name", "key", "version", "body", "where", "refused"), CASES, ids=[c[0] for c in CASES]
)
def test_without_acls_every_api_is_refused(
    secured: Running, name: str, key: int, version: int, body: dict[str, Any], where: Any, refused: Any
) -> None:
    with _session(secured, "alice") as alice:
        got = where(_ask(alice, key, version, body))
        assert (int(got) if isinstance(got, int) else got) == refused, name


#: APIs that change state (commits, joins, creations, deletions, ACLs): a super user's success
#: with them is checked through the real clients' tests instead.
_STATEFUL = (8, 19, 20, 30, 31, 33, 37, 42, 44, 47)
_READ_ONLY = [c for c in CASES if c[1] not in _STATEFUL]


@pytest.mark.parametrize(
    ("name", "key", "version", "body", "where", "refused"), _READ_ONLY, ids=[c[0] for c in _READ_ONLY]
)
def test_a_super_user_is_never_refused(
    secured: Running, name: str, key: int, version: int, body: dict[str, Any], where: Any, refused: Any
) -> None:
    with _session(secured, "admin") as admin:
        got = where(_ask(admin, key, version, body))
        if isinstance(refused, list):
            assert got != [], name  # the super user sees what alice's listing hid
        else:
            assert int(got) not in (TOPIC, GROUP, CLUSTER, TXN), name


def test_a_transaction_with_authentication_on(secured: Running) -> None:
    """A user allowed on the transactional id and the topic commits a transaction (SASL PLAIN)."""
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    p = Producer(
        {
            "bootstrap.servers": secured.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
            "transactional.id": "matrix-admin-tid",
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(T, value=b"secured-txn", partition=0)
    p.commit_transaction(30)
    values = DeltaTable(secured.storage.topic_uri(T)).to_pyarrow_table()["value"].to_pylist()
    assert values.count(b"secured-txn") == 1
