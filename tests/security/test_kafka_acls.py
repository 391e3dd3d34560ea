"""ACLs on the Kafka listener with real clients: CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's
and kafka-python's admin clients, and the per-API checks (produce, consume in a group, metadata listing,
create/delete topics, configs, groups): no ACL -> *_AUTHORIZATION_FAILED, the right ACL -> success, deny
wins, prefixed patterns, the TLS certificate's principal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from test_kafka_sasl import PASSWORDS, sasl_conf
from tls_harness import Certs, Running, make_certs, start

from topiclake.security import UserStore

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.htpasswd"
    store = UserStore(path)
    for name, password in PASSWORDS.items():
        store.add(name, password)
    return path


@pytest.fixture
def secured(tmp_path: Path, users: Path) -> Iterator[Running]:
    running = start(tmp_path / "wh", auth=True, users_file=str(users), super_users=["User:admin"])
    try:
        yield running
    finally:
        running.stop()


def _admin(running: Running, user: str) -> AdminClient:
    return AdminClient(sasl_conf(running, user))


def _acl(rtype: ResourceType, name: str, op: AclOperation, perm: Any = ALLOW, pattern: Any = LITERAL,
         principal: str = "User:alice") -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def _grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for fut in admin.create_acls(list(bindings), request_timeout=10).values():
        fut.result(timeout=20)


def _create(admin: AdminClient, *topics: str) -> None:
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics], operation_timeout=10).values():
        fut.result(timeout=20)


def _produce(running: Running, user: str, topic: str, idempotent: bool = False) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    report: list[KafkaError | None] = []
    conf = {**sasl_conf(running, user), "acks": "all", "message.timeout.ms": 5000}
    producer = Producer({**conf, "enable.idempotence": idempotent})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: report.append(err))
    producer.flush(15)
    return report[0] if report else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_acl_apis_with_confluent_kafka(secured: Running) -> None:
    admin = _admin(secured, "admin")
    _grant(
        admin,
        _acl(ResourceType.TOPIC, "orders", AclOperation.READ),
        _acl(ResourceType.TOPIC, "pay-", AclOperation.WRITE, pattern=PREFIXED),
        _acl(ResourceType.GROUP, "*", AclOperation.READ, principal="User:*"),
    )
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    listed = admin.describe_acls(everything, request_timeout=10).result(timeout=20)
    assert len(listed) == 3
    assert {(b.name, b.resource_pattern_type) for b in listed} == {
        ("orders", LITERAL),
        ("pay-", PREFIXED),
        ("*", LITERAL),
    }
    # MATCH: every binding that applies to the topic pay-eu
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "pay-eu",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert [b.name for b in admin.describe_acls(match, request_timeout=10).result(timeout=20)] == ["pay-"]
    # alice may not manage ACLs: CLUSTER_AUTHORIZATION_FAILED (librdkafka drops DescribeAcls' error code
    # and answers an empty list, as against Apache Kafka; kafka-python's test sees the code)
    alice = _admin(secured, "alice")
    assert alice.describe_acls(everything, request_timeout=10).result(timeout=20) == []
    with pytest.raises(KafkaException) as err:
        _grant(alice, _acl(ResourceType.TOPIC, "x", AclOperation.READ))
    assert err.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    groups_only = AclBindingFilter(
        ResourceType.GROUP, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    deleted = [
        b for fut in admin.delete_acls([groups_only], request_timeout=10).values() for b in fut.result(20)
    ]
    assert [b.name for b in deleted] == ["*"]
    assert len(admin.describe_acls(everything, request_timeout=10).result(timeout=20)) == 2
    # a MATCH delete removes what applies to pay-eu (the prefix), not the literal orders
    deleted = [b for fut in admin.delete_acls([match], request_timeout=10).values() for b in fut.result(20)]
    assert [b.name for b in deleted] == ["pay-"]
    left = admin.describe_acls(everything, request_timeout=10).result(timeout=20)
    assert [b.name for b in left] == ["orders"]


def test_acl_apis_with_kafka_python(secured: Running) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ACLResourcePatternType as Pat
    from kafka.admin import ResourceType as RT

    from kafka import KafkaAdminClient

    conf = {
        "bootstrap_servers": secured.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "admin",
        "sasl_plain_password": PASSWORDS["admin"],
    }
    admin = KafkaAdminClient(**conf)
    try:
        acl = ACL(
            "User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, ResourcePattern(RT.TOPIC, "logs")
        )
        created = admin.create_acls([acl])
        assert not created["failed"], created
        flt = ACLFilter(
            "User:bob",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(RT.ANY, None, Pat.ANY),
        )
        found, _err = admin.describe_acls(flt)
        assert [(a.resource_pattern.resource_name, a.operation) for a in found] == [
            ("logs", ACLOperation.WRITE)
        ]
        removed = admin.delete_acls([flt])
        assert len(removed[0][1]) == 1
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()
    from kafka.errors import ClusterAuthorizationFailedError

    alice = KafkaAdminClient(
        **{**conf, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORDS["alice"]}
    )
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_acls(flt)
    finally:
        alice.close()


def test_produce_consume_and_metadata_follow_the_acls(secured: Running) -> None:
    admin = _admin(secured, "admin")
    _create(admin, "orders", "secret", "pay-eu")
    # no ACL: TOPIC_AUTHORIZATION_FAILED, and the listing hides every topic
    assert _produce(secured, "alice", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = _admin(secured, "alice")
    assert set(alice.list_topics(timeout=10).topics) == set()
    # Write via a prefixed ACL; Read on orders; deny wins over allow on secret
    _grant(
        admin,
        _acl(ResourceType.TOPIC, "pay-", AclOperation.WRITE, pattern=PREFIXED),
        _acl(ResourceType.TOPIC, "orders", AclOperation.ALL),
        _acl(ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
        _acl(ResourceType.TOPIC, "secret", AclOperation.DESCRIBE, perm=DENY),
    )
    assert _produce(secured, "alice", "pay-eu") is None
    # idempotent: InitProducerId needs IdempotentWrite on the cluster or Write on some topic (Kafka 3.x)
    assert _produce(secured, "alice", "orders", idempotent=True) is None
    assert set(alice.list_topics(timeout=10).topics) == {"orders", "pay-eu"}  # secret: denied Describe
    meta = alice.list_topics("secret", timeout=10).topics["secret"]
    assert meta.error is not None and meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # a group: Read on the topic is there, Read on the group is not yet
    conf = {**sasl_conf(secured, "alice"), "group.id": "billing", "auto.offset.reset": "earliest"}
    consumer = Consumer(conf)
    try:
        consumer.subscribe(["orders"])
        error = _first_error(consumer)
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    _grant(admin, _acl(ResourceType.GROUP, "bill", AclOperation.READ, pattern=PREFIXED))
    consumer = Consumer(conf)
    try:
        consumer.subscribe(["orders"])
        got = _first_message(consumer)
        assert got == b"v"
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("orders", 0)], timeout=10)
        assert committed[0].offset == 1
    finally:
        consumer.close()


def _first_error(consumer: Consumer, seconds: float = 15) -> KafkaError | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            return msg.error()
    return None


def _first_message(consumer: Consumer, seconds: float = 20) -> bytes | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            return msg.value()
    return None


def test_admin_apis_follow_the_acls(secured: Running) -> None:
    admin = _admin(secured, "admin")
    alice = _admin(secured, "alice")
    with pytest.raises(KafkaException) as err:
        _create(alice, "mine")
    assert err.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _grant(admin, _acl(ResourceType.TOPIC, "mine", AclOperation.CREATE))
    _create(alice, "mine")
    resource = ConfigResource(ConfigResource.Type.TOPIC, "mine")
    with pytest.raises(KafkaException):
        alice.describe_configs([resource])[resource].result(timeout=20)
    _grant(admin, _acl(ResourceType.TOPIC, "mine", AclOperation.ALTER_CONFIGS))
    assert "retention.ms" in alice.describe_configs([resource])[resource].result(timeout=20)
    with pytest.raises(KafkaException) as err:
        alice.delete_topics(["mine"], operation_timeout=10)["mine"].result(timeout=20)
    assert err.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _grant(admin, _acl(ResourceType.TOPIC, "mine", AclOperation.DELETE))
    alice.delete_topics(["mine"], operation_timeout=10)["mine"].result(timeout=20)
    # groups: listing shows only the groups alice may Describe
    _grant(admin, _acl(ResourceType.GROUP, "g-alice", AclOperation.DESCRIBE))
    _create(admin, "gt")
    for group in ("g-alice", "g-other"):
        secured.broker.groups.commit(group, None, -1, {("gt", 0): (0, None)}, foreign_ok=True)
    everyone = admin.list_consumer_groups(request_timeout=10).result(timeout=20)
    assert {g.group_id for g in everyone.valid} >= {"g-alice", "g-other"}
    listed = alice.list_consumer_groups(request_timeout=10).result(timeout=20)
    assert [g.group_id for g in listed.valid] == ["g-alice"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


def test_a_tls_certificate_is_the_principal_of_the_acls(tmp_path: Path, users: Path, certs: Certs) -> None:
    running = start(
        tmp_path / "wh",
        auth=True,
        users_file=str(users),
        super_users=["User:ops"],
        tls_principal_mapping_rules="RULE:^CN=([a-z]+),OU=eng,O=Acme$/$1/,DEFAULT",
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        tls_ca=str(certs.ca),
    )
    try:

        def conf(cn: str) -> dict[str, Any]:
            cert, key = certs.client(cn)
            return {
                "bootstrap.servers": running.bootstrap,
                "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca),
                "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key),
            }

        ops = AdminClient(conf("ops"))
        _create(ops, "tls-topic")
        _grant(
            ops,
            _acl(ResourceType.TOPIC, "tls-topic", AclOperation.WRITE, principal="User:dave"),
        )
        for cn, ok in (("dave", True), ("erin", False)):
            report: list[Any] = []
            producer = Producer({**conf(cn), "message.timeout.ms": 5000})
            producer.produce("tls-topic", b"x", on_delivery=lambda err, _m, seen=report: seen.append(err))
            producer.flush(15)
            assert (report[0] is None) == ok, report
    finally:
        running.stop()


def test_a_producer_creates_a_topic_only_with_create(secured: Running) -> None:
    """auto.create.topics.enable with auth, Kafka's rule: the Metadata request creates a topic it names
    only for a principal with Create on the cluster or the topic; with Write alone the topic stays unknown."""
    admin = _admin(secured, "admin")
    _grant(
        admin,
        _acl(ResourceType.TOPIC, "auto-", AclOperation.WRITE, pattern=PREFIXED),
        _acl(ResourceType.TOPIC, "auto-", AclOperation.DESCRIBE, pattern=PREFIXED),
    )
    error = _produce(secured, "alice", "auto-k")
    assert error is not None and error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    assert "auto-k" not in admin.list_topics(timeout=10).topics
    _grant(admin, _acl(ResourceType.TOPIC, "auto-k", AclOperation.CREATE))
    assert _produce(secured, "alice", "auto-k") is None
    assert len(admin.list_topics(timeout=10).topics["auto-k"].partitions) == 1
