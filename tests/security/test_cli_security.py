"""``topiclake users`` and ``topiclake acls`` (kafka-acls' options) through Typer's runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.platform import Storage
from topiclake.security import (
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    UserStore,
)

runner = CliRunner()


def test_users_add_list_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users = str(tmp_path / "users")
    add = ["users", "add", "alice", "--users-file", users, "--password-stdin"]
    r = runner.invoke(app, add, input="pw1\n")
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("TOPICLAKE_USER_PASSWORD", "pw2")
    assert runner.invoke(app, ["users", "add", "bob", "--users-file", users]).exit_code == 0
    monkeypatch.delenv("TOPICLAKE_USER_PASSWORD")
    r = runner.invoke(app, ["users", "add", "carol", "--users-file", users], input="pw3\npw3\n")
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["users", "list", "--users-file", users])
    assert r.output.split() == ["alice", "bob", "carol"]
    store = UserStore(users)
    assert store.verify_password("alice", "pw1") and store.verify_password("bob", "pw2")
    assert store.verify_password("carol", "pw3")
    assert runner.invoke(app, ["users", "remove", "bob", "--users-file", users]).exit_code == 0
    assert runner.invoke(app, ["users", "remove", "bob", "--users-file", users]).exit_code == 1
    assert UserStore(users).names() == ["alice", "carol"]


def test_acls_add_list_remove(tmp_path: Path) -> None:
    wh = ["--warehouse", str(tmp_path / "wh")]
    r = runner.invoke(
        app,
        [
            "acls",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "read",
            "--operation",
            "Describe",
            "--topic",
            "orders",
            "--topic",
            "logs",
            *wh,
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "acls",
            "add",
            "--allow-principal",
            "User:bob",
            "--producer",
            "--idempotent",
            "--topic",
            "team-",
            "--resource-pattern-type",
            "prefixed",
            *wh,
        ],
    )
    assert r.exit_code == 0, r.output
    consumer = ["acls", "add", "--allow-principal", "User:carol", "--consumer", "--topic", "orders"]
    r = runner.invoke(app, [*consumer, "--group", "g", *wh])
    assert r.exit_code == 0, r.output
    deny = "acls add --deny-principal User:alice --deny-host 10.0.0.9 --operation All --cluster"
    r = runner.invoke(app, [*deny.split(), *wh])
    assert r.exit_code == 0, r.output
    authz = Authorizer(Storage(str(tmp_path / "wh")))
    alice, bob = authz.list(AclFilter(principal="User:alice")), authz.list(AclFilter(principal="User:bob"))
    assert len(alice) == 5
    assert {(b.operation, b.pattern_type) for b in bob} == {
        (Operation.WRITE, PatternType.PREFIXED),
        (Operation.DESCRIBE, PatternType.PREFIXED),
        (Operation.CREATE, PatternType.PREFIXED),
        (Operation.IDEMPOTENT_WRITE, PatternType.LITERAL),
    }
    carol = authz.list(AclFilter(principal="User:carol"))
    assert {(b.resource_type, b.operation) for b in carol} == {
        (ResourceType.TOPIC, Operation.READ),
        (ResourceType.TOPIC, Operation.DESCRIBE),
        (ResourceType.GROUP, Operation.READ),
    }
    assert any(b.permission == Permission.DENY and b.host == "10.0.0.9" for b in alice)

    r = runner.invoke(app, ["acls", "list", "--topic", "team-abc", "--resource-pattern-type", "match", *wh])
    assert r.exit_code == 0 and "User:bob" in r.output and "User:alice" not in r.output
    r = runner.invoke(app, ["acls", "list", "--principal", "User:carol", *wh])
    assert "User:carol" in r.output and "User:bob" not in r.output

    r = runner.invoke(app, ["acls", "remove", "--topic", "orders", "--force", *wh])  # every ACL of the topic
    assert r.exit_code == 0 and "Removed 4 ACLs" in r.output, r.output
    r = runner.invoke(
        app,
        [
            "acls",
            "remove",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Write",
            "--topic",
            "team-",
            "--resource-pattern-type",
            "prefixed",
            "--force",
            *wh,
        ],
    )
    assert "Removed 1 ACLs" in r.output, r.output
    assert len(Authorizer(Storage(str(tmp_path / "wh"))).list()) == 7
    bad = "acls add --allow-principal alice --operation Read --topic x"
    r = runner.invoke(app, [*bad.split(), *wh])
    assert r.exit_code != 0
