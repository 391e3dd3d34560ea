"""Kafka's StandardAuthorizer rules over ACLs kept in the Delta table ``_system/acls``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from topiclake.platform import Storage
from topiclake.security import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from topiclake.security.acl import parse_operation, parse_resource_type

ALICE = Principal("User", "alice")
BOB = Principal("User", "bob")
T = ResourceType.TOPIC
G = ResourceType.GROUP


def acl(
    principal: str = "User:alice",
    op: Operation = Operation.READ,
    name: str = "orders",
    *,
    rtype: ResourceType = T,
    pattern: PatternType = PatternType.LITERAL,
    permission: Permission = Permission.ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(principal, host, rtype, name, pattern, op, permission)


@pytest.fixture
def authz(tmp_path: Path) -> Authorizer:
    return Authorizer(Storage(str(tmp_path)), super_users=["User:admin"])


def test_principal_parse_and_str() -> None:
    assert Principal.parse("User:alice") == ALICE
    assert str(ALICE) == "User:alice"
    assert Principal.parse("User:CN=a,O=b") == Principal("User", "CN=a,O=b")
    for bad in ("alice", ":x", "User:"):
        with pytest.raises(ValueError):
            Principal.parse(bad)


def test_enum_parsing_is_lenient_about_case() -> None:
    assert parse_operation("describe_configs") is Operation.DESCRIBE_CONFIGS
    assert parse_operation("IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    assert parse_resource_type("TRANSACTIONAL_ID") is ResourceType.TRANSACTIONAL_ID
    with pytest.raises(ValueError):
        parse_operation("fly")


def test_nothing_is_allowed_without_an_acl_and_off_allows_all(tmp_path: Path) -> None:
    on = Authorizer(Storage(str(tmp_path)))
    assert not on.authorize(ALICE, "127.0.0.1", Operation.READ, T, "orders")
    off = Authorizer(None, enabled=False)
    assert off.authorize(ALICE, "127.0.0.1", Operation.DELETE, T, "orders")


def test_literal_allow_and_implied_describe(authz: Authorizer) -> None:
    authz.add([acl(op=Operation.WRITE)])
    assert authz.authorize(ALICE, "10.0.0.1", Operation.WRITE, T, "orders")
    assert authz.authorize(ALICE, "10.0.0.1", Operation.DESCRIBE, T, "orders")  # Write implies Describe
    assert not authz.authorize(ALICE, "10.0.0.1", Operation.READ, T, "orders")
    assert not authz.authorize(ALICE, "10.0.0.1", Operation.WRITE, T, "orders2")
    assert not authz.authorize(BOB, "10.0.0.1", Operation.WRITE, T, "orders")
    assert not authz.authorize(ALICE, "10.0.0.1", Operation.WRITE, G, "orders")


def test_alter_configs_implies_describe_configs_only(authz: Authorizer) -> None:
    authz.add([acl(op=Operation.ALTER_CONFIGS)])
    assert authz.authorize(ALICE, "h", Operation.DESCRIBE_CONFIGS, T, "orders")
    assert not authz.authorize(ALICE, "h", Operation.DESCRIBE, T, "orders")


def test_deny_wins_and_all_matches_every_operation(authz: Authorizer) -> None:
    authz.add([acl(op=Operation.ALL), acl(op=Operation.WRITE, permission=Permission.DENY)])
    assert authz.authorize(ALICE, "h", Operation.READ, T, "orders")
    assert authz.authorize(ALICE, "h", Operation.DELETE, T, "orders")
    assert not authz.authorize(ALICE, "h", Operation.WRITE, T, "orders")
    # a deny of Read does not deny Describe (denies imply nothing), an ALL deny denies everything
    authz.add([acl("User:*", Operation.ALL, "*", permission=Permission.DENY, host="10.9.9.9")])
    assert not authz.authorize(ALICE, "10.9.9.9", Operation.READ, T, "orders")
    assert authz.authorize(ALICE, "10.0.0.1", Operation.READ, T, "orders")


def test_wildcards_prefixes_and_hosts(authz: Authorizer) -> None:
    authz.add(
        [
            acl("User:*", Operation.READ, "public", host="*"),
            acl("User:alice", Operation.WRITE, "*"),
            acl("User:bob", Operation.READ, "team-a.", pattern=PatternType.PREFIXED),
            acl("User:bob", Operation.READ, "team-a.secret", permission=Permission.DENY),
            acl("User:bob", Operation.WRITE, "logs", host="10.0.0.5"),
        ]
    )
    assert authz.authorize(BOB, "h", Operation.READ, T, "public")  # User:* matches everyone
    assert authz.authorize(ALICE, "h", Operation.WRITE, T, "anything")  # literal "*" matches every topic
    assert authz.authorize(BOB, "h", Operation.READ, T, "team-a.orders")
    assert not authz.authorize(BOB, "h", Operation.READ, T, "team-b.orders")
    assert not authz.authorize(BOB, "h", Operation.READ, T, "team-a.secret")
    assert authz.authorize(BOB, "10.0.0.5", Operation.WRITE, T, "logs")
    assert not authz.authorize(BOB, "10.0.0.6", Operation.WRITE, T, "logs")


def test_super_users_are_allowed_everything(authz: Authorizer) -> None:
    authz.add([acl("User:admin", Operation.ALL, "*", permission=Permission.DENY)])
    admin = Principal("User", "admin")
    assert authz.authorize(admin, "h", Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")


def test_authorize_any_for_idempotent_style_checks(authz: Authorizer) -> None:
    assert not authz.authorize_any(ALICE, "h", Operation.WRITE, T)
    authz.add([acl(op=Operation.WRITE, name="x", pattern=PatternType.PREFIXED)])
    assert authz.authorize_any(ALICE, "h", Operation.WRITE, T)
    authz.add([acl(op=Operation.WRITE, name="x", pattern=PatternType.PREFIXED, permission=Permission.DENY)])
    assert not authz.authorize_any(ALICE, "h", Operation.WRITE, T)


def test_filters_list_and_remove(authz: Authorizer) -> None:
    a, b = acl(), acl("User:bob", Operation.WRITE, "or", pattern=PatternType.PREFIXED)
    c = acl("User:bob", Operation.READ, "*")
    authz.add([a, b, c, a])
    assert authz.list() == [a, b, c]  # a duplicate is stored once
    assert authz.list(AclFilter(principal="User:bob")) == [b, c]
    assert authz.list(AclFilter(resource_name="or")) == [b]  # ANY: exact names
    assert authz.list(AclFilter(resource_type=T, resource_name="orders", match=True)) == [a, b, c]
    assert authz.list(AclFilter(pattern_type=PatternType.PREFIXED)) == [b]
    assert authz.remove(AclFilter(principal="User:bob", operation=Operation.READ)) == [c]
    assert authz.list() == [a, b]
    assert authz.remove(AclFilter(principal="User:nobody")) == []


def test_the_acls_are_a_time_travelled_delta_table(authz: Authorizer, tmp_path: Path) -> None:
    authz.add([acl()])
    authz.add([acl(op=Operation.WRITE)])
    authz.remove(AclFilter(operation=Operation.READ))
    dt = DeltaTable(str(tmp_path / "_system" / "acls"))
    assert dt.version() == 2
    assert [r["operation"] for r in dt.to_pyarrow_table().to_pylist()] == ["Write"]
    dt.load_as_version(1)
    assert sorted(r["operation"] for r in dt.to_pyarrow_table().to_pylist()) == ["Read", "Write"]
    assert any("topiclake.acls.change" in h for h in dt.history())


def test_a_change_by_another_broker_is_seen_within_the_poll(tmp_path: Path) -> None:
    first = Authorizer(Storage(str(tmp_path)), poll_interval_s=0.2)
    second = Authorizer(Storage(str(tmp_path)), poll_interval_s=0.2)
    second.start()
    try:
        assert not second.authorize(ALICE, "h", Operation.READ, T, "orders")
        first.add([acl()])
        deadline = time.monotonic() + 5
        while not second.authorize(ALICE, "h", Operation.READ, T, "orders"):
            assert time.monotonic() < deadline, "the other broker never saw the ACL"
            time.sleep(0.05)
        first.remove(AclFilter())
        deadline = time.monotonic() + 5
        while second.authorize(ALICE, "h", Operation.READ, T, "orders"):
            assert time.monotonic() < deadline, "the other broker never saw the removal"
            time.sleep(0.05)
    finally:
        second.close()


def test_two_writers_lose_nothing(tmp_path: Path) -> None:
    import threading

    writers = [Authorizer(Storage(str(tmp_path))) for _ in range(3)]
    writers[0].add([acl(name="seed")])

    def add(i: int) -> None:
        for j in range(3):
            writers[i].add([acl(name=f"t{i}-{j}")])

    threads = [threading.Thread(target=add, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    names = {b.resource_name for b in writers[0].list()}
    assert names == {"seed"} | {f"t{i}-{j}" for i in range(3) for j in range(3)}
