"""Client quotas kept in ``_system/quotas``: the layering of limits, every broker re-reading the table, the
CLI, and Kafka's AlterClientQuotas/DescribeClientQuotas from Kafka's own Java AdminClient (the calls
``kafka-configs --entity-type users`` makes), with Kafka's ACL rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kafka"))

from gateway_harness import Gateway, start_gateway, stop_gateway
from kafka_jars import JAVA as JAVA_COMMAND
from kafka_jars import classpath, compiled

from topiclake.cli import run
from topiclake.platform import Storage
from topiclake.process.ports import free_port
from topiclake.security import AclBinding, Operation, PatternType, Permission, ResourceType, UserStore
from topiclake.security.quota_store import QuotaStore
from topiclake.security.quota_table import QuotaChange, QuotaTable
from topiclake.security.quotas import QuotaKind, QuotaLimits, Quotas

P, F, R = QuotaKind.PRODUCE, QuotaKind.FETCH, QuotaKind.REQUEST


def test_the_table_layers_over_the_settings(tmp_path: Path) -> None:
    quotas = Quotas(QuotaLimits(produce_bytes_per_s=100), {"User:env": QuotaLimits(7, 8, 9)})
    store = QuotaStore(Storage(str(tmp_path / "wh")), quotas)
    store.start()
    try:
        assert quotas.limits("User:bob") == QuotaLimits(100, 0, 0)
        store.alter([QuotaChange(None, "consumer_byte_rate", 50)], "default user")
        store.alter(
            [
                QuotaChange("alice", "producer_byte_rate", 1000),
                QuotaChange("env", "request_rate", 3),
                QuotaChange("etl", "producer_byte_rate", 0),  # 0 = unlimited, whatever the default
            ],
            "three users",
        )
        assert quotas.limits("User:bob") == QuotaLimits(100, 50, 0)  # the default user's, over the settings
        assert quotas.limits("User:alice") == QuotaLimits(1000, 50, 0)  # its own, then the default user's
        assert quotas.limits("User:env") == QuotaLimits(7, 8, 3)  # its own, then its deprecated override
        assert quotas.limits("User:etl").rate(P) == 0
        assert store.describe() == {
            None: {"consumer_byte_rate": 50.0},
            "alice": {"producer_byte_rate": 1000.0},
            "env": {"request_rate": 3.0},
            "etl": {"producer_byte_rate": 0.0},
        }
        store.alter([QuotaChange("alice", "producer_byte_rate", None)], "remove")
        assert quotas.limits("User:alice") == QuotaLimits(100, 50, 0)
        with pytest.raises(Exception, match="unknown quota"):
            store.alter([QuotaChange("alice", "request_percentage", 10)], "bad key")
    finally:
        store.close()


def test_quotas_turn_accounting_on_and_off_live(tmp_path: Path) -> None:
    quotas = Quotas()
    store = QuotaStore(Storage(str(tmp_path / "wh")), quotas)
    assert not quotas.enabled  # the listeners skip every accounting step
    store.alter([QuotaChange("alice", "request_rate", 5)], "on")
    assert quotas.enabled
    store.alter([QuotaChange("alice", "request_rate", None)], "off")
    assert not quotas.enabled


def test_every_broker_applies_a_change_made_elsewhere(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    other = Quotas()
    watcher = QuotaStore(storage, other, poll_interval_s=0.1)
    watcher.start()
    try:
        QuotaTable(storage).alter([QuotaChange("alice", "producer_byte_rate", 2048)], "elsewhere")
        deadline = time.monotonic() + 10
        while other.limits("User:alice").rate(P) != 2048 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.limits("User:alice").rate(P) == 2048
    finally:
        watcher.close()


def test_cli_sets_describes_and_deletes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = ["--warehouse", str(tmp_path / "wh")]
    assert run(["quotas", "set", "--user", "alice", "--add-config", "producer_byte_rate=1048576", *wh]) == 0
    assert run(["quotas", "set", "--user-default", "--add-config", "consumer_byte_rate=5000", *wh]) == 0
    assert run(["quotas", "set", "--user", "bob", "--add-config", "nonsense=1", *wh]) == 1
    capsys.readouterr()
    assert run(["quotas", "describe", "--json", *wh]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described == [
        {"user": None, "principal": "<default>", "quotas": {"consumer_byte_rate": 5000.0}},
        {"user": "alice", "principal": "User:alice", "quotas": {"producer_byte_rate": 1048576.0}},
    ]
    assert run(["quotas", "delete", "--user", "alice", *wh]) == 0
    _, table = QuotaTable(Storage(str(tmp_path / "wh"))).read()
    assert table == {None: {"consumer_byte_rate": 5000.0}}


# -- Kafka's AlterClientQuotas / DescribeClientQuotas ---------------------------------------------------

JAVA = Path(__file__).resolve().parent / "ClientQuotas.java"
USERS = {"admin": "admin-pw", "alice": "alice-pw", "ops": "ops-pw"}


@pytest.fixture(scope="module")
def java_admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path, int]]:
    """A gateway with auth on and a Kafka listener; Kafka's AdminClient compiled against its own jars."""
    if shutil.which("javac") is None:
        pytest.skip("needs a JDK (the Spark tests need one too)")
    root = tmp_path_factory.mktemp("quota-kafka")
    compiled(JAVA, classpath())
    store = UserStore(root / "users.htpasswd")
    for name, pw in USERS.items():
        store.add(name, pw)
        (root / f"{name}.properties").write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{name}" password="{pw}";\n'
        )
    port = free_port()
    gw, server, thread = start_gateway(
        root / "wh",
        settings_overrides={
            "auth": True,
            "users_file": str(root / "users.htpasswd"),
            "super_users": ["User:admin"],
        },
        kafka_port=port,
    )
    try:
        authz = server.config.app.state.security.authorizer
        for op in (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS):
            authz.add(
                [
                    AclBinding(
                        "User:ops",
                        "*",
                        ResourceType.CLUSTER,
                        "kafka-cluster",
                        PatternType.LITERAL,
                        op,
                        Permission.ALLOW,
                    )
                ]
            )
        gw.quotas = server.config.app.state.quotas  # type: ignore[attr-defined]
        yield gw, root, port
    finally:
        stop_gateway(gw, server, thread)


def _admin(setup: tuple[Gateway, Path, int], user: str, *args: str) -> subprocess.CompletedProcess[str]:
    _, root, port = setup
    cp = f"{classpath()}:{compiled(JAVA, classpath())}"
    props = str(root / f"{user}.properties")
    cmd = [*JAVA_COMMAND, "-cp", cp, "ClientQuotas", f"127.0.0.1:{port}", props, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_kafka_admin_client_alters_and_describes_quotas(java_admin: tuple[Gateway, Path, int]) -> None:
    gw = java_admin[0]
    quotas: Quotas = gw.quotas  # type: ignore[attr-defined]
    assert not quotas.enabled
    out = _admin(java_admin, "admin", "alter", "alice", "producer_byte_rate=1024", "consumer_byte_rate=2048")
    assert out.returncode == 0 and "altered" in out.stdout, out.stdout + out.stderr[-2000:]
    out = _admin(java_admin, "ops", "alter", "<default>", "request_rate=50")  # AlterConfigs on the cluster
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    # the broker applies it at once: alice is limited, everyone else gets the default user's rate
    assert quotas.enabled
    assert quotas.limits("User:alice") == QuotaLimits(1024, 2048, 50)
    assert quotas.limits("User:carol") == QuotaLimits(0, 0, 50)
    out = _admin(java_admin, "ops", "describe")  # DescribeConfigs on the cluster
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.splitlines() == [
        "user=<default> request_rate=50.0",
        "user=alice consumer_byte_rate=2048.0 producer_byte_rate=1024.0",
    ]
    # removing a key (a null value), as kafka-configs --delete-config
    out = _admin(java_admin, "admin", "alter", "alice", "consumer_byte_rate=")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert quotas.limits("User:alice") == QuotaLimits(1024, 0, 50)
    _, table = QuotaTable(gw.storage).read()  # what the CLI and SQL see
    assert table == {None: {"request_rate": 50.0}, "alice": {"producer_byte_rate": 1024.0}}


@pytest.mark.slow
def test_kafka_quota_apis_follow_kafkas_acls_and_entities(java_admin: tuple[Gateway, Path, int]) -> None:
    out = _admin(java_admin, "alice", "alter", "alice", "producer_byte_rate=1")  # no AlterConfigs
    assert out.returncode == 1 and "ClusterAuthorizationException" in out.stdout, out.stdout + out.stderr
    out = _admin(java_admin, "alice", "describe")  # no DescribeConfigs
    assert out.returncode == 1 and "ClusterAuthorizationException" in out.stdout, out.stdout + out.stderr
    out = _admin(java_admin, "admin", "alter-client", "app-1", "producer_byte_rate=1")
    assert out.returncode == 1 and "InvalidRequestException" in out.stdout, out.stdout + out.stderr
    out = _admin(java_admin, "admin", "alter", "alice", "request_percentage=10")  # Kafka's, not ours
    assert out.returncode == 1, out.stdout + out.stderr
    _, table = QuotaTable(java_admin[0].storage).read()
    assert "app-1" not in table and "request_percentage" not in table.get("alice", {})
