"""``topiclake sql --print-conf`` on an S3 warehouse: the flags another Spark program needs, without the
secret key or session token unless ``--show-secrets`` (printed flags end up in shell history and ``ps``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from topiclake.cli import app


def _flags(stdout: str) -> dict[str, str]:
    return dict(line.removeprefix("--conf ").split("=", 1) for line in stdout.splitlines())


def test_print_conf_leaves_out_s3_secrets_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-value")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    args = ["sql", "--print-conf", "--warehouse", "s3://lake-bucket/topics"]

    quiet = CliRunner().invoke(app, args)
    assert quiet.exit_code == 0, quiet.output
    assert "very-secret-value" not in quiet.stdout and "token-value" not in quiet.stdout
    flags = _flags(quiet.stdout)
    prefix = "spark.hadoop.fs.s3a.bucket.lake-bucket."
    assert flags[prefix + "access.key"] == "AKIDEXAMPLE"
    assert flags[prefix + "endpoint"] == "http://127.0.0.1:9"
    assert prefix + "secret.key" not in flags and prefix + "session.token" not in flags
    assert "--show-secrets" in quiet.stderr and prefix + "secret.key" in quiet.stderr

    shown = CliRunner().invoke(app, [*args, "--show-secrets"])
    assert shown.exit_code == 0, shown.output
    flags = _flags(shown.stdout)
    assert flags[prefix + "secret.key"] == "very-secret-value"
    assert flags[prefix + "session.token"] == "token-value"
    assert shown.stderr == ""
