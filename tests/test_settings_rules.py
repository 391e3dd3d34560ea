"""Settings that would break a serving broker are refused at start, with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from topiclake.platform import BrokerConfig
from topiclake.settings import GatewaySettings
from topiclake.settings_rules import invalid_settings

TOPICLAKE = str(Path(sys.executable).parent / "topiclake")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"broker": BrokerConfig(log_retention_ms=500)}, "broker.log_retention_ms=500 is under 1000 ms"),
        ({"broker": BrokerConfig(linger_ms=40_000)}, "must be below broker.request_timeout_ms=30000"),
        (
            {"broker": BrokerConfig(heartbeat_interval_ms=4000, session_timeout_ms=6000)},
            "must be at least twice broker.heartbeat_interval_ms=4000",
        ),
        (
            {"broker": BrokerConfig(forward_timeout_ms=5000)},
            "broker.forward_timeout_ms=5000 must exceed broker.session_timeout_ms=6000",
        ),
        (
            {"broker": BrokerConfig(maintenance_interval_ms=20_000, log_retention_ms=10_000)},
            "log cleanup could not keep the window",
        ),
        ({"consumer_request_timeout_ms": 400_000}, "must be below consumer_instance_timeout_ms=300000"),
        ({"port": 9092, "kafka_port": 9092}, "kafka_port=9092 is also port"),
    ],
)
def test_breaking_settings_are_refused_with_the_reason(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        GatewaySettings(**fields)  # type: ignore[arg-type]
    error = invalid_settings(info.value)
    assert reason in error.message
    assert "Value error" not in error.message


def test_sound_settings_pass() -> None:
    settings = GatewaySettings(
        cluster=False, broker=BrokerConfig(heartbeat_interval_ms=4000, log_retention_ms=1000)
    )
    assert settings.broker.log_retention_ms == 1000
    assert GatewaySettings().broker.linger_ms < GatewaySettings().broker.request_timeout_ms


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TOPICLAKE_BROKER__LOG_RETENTION_MS": "500"}, "broker.log_retention_ms=500 is under 1000 ms"),
        ({"TOPICLAKE_BROKER__LOG_RETENTION_MS": "-1"}, "broker.log_retention_ms"),
        ({"TOPICLAKE_BROKER__LINGER_MS": "-5"}, "broker.linger_ms"),
    ],
)
def test_serve_exits_1_with_the_reason_and_no_traceback(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    proc = subprocess.run(
        [TOPICLAKE, "serve", "--warehouse", str(tmp_path / "wh"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("InvalidSettings: settings refused: "), proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_refuses_a_bad_broker_id_flag_combination(tmp_path: Path) -> None:
    """Flags go through the same rules as the environment (here the ports flag collides with Kafka's)."""
    proc = subprocess.run(
        [TOPICLAKE, "serve", "--warehouse", str(tmp_path / "wh"), "--port", "7777", "--kafka-port", "7777"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "kafka_port=7777 is also port" in proc.stderr
    assert "Traceback" not in proc.stderr
