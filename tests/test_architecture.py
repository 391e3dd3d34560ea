"""Rules that keep the layers apart: the core and the gateway never load Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_platform_and_api_never_import_pyspark() -> None:
    code = (
        "import sys\n"
        "import topiclake.platform, topiclake.api, topiclake.cli, topiclake.settings, topiclake.schemas\n"
        "from topiclake.api import create_app\n"
        "create_app()\n"
        "bad = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_no_top_level_module_shadows_the_stdlib() -> None:
    for name in ("platform", "api", "jobs", "schemas"):
        assert not (REPO / name / "__init__.py").exists()
        assert not (REPO / f"{name}.py").exists()
        assert not (REPO / "src" / name).exists()
    import platform

    assert hasattr(platform, "python_version"), "the stdlib platform module is shadowed"


def test_foreign_errors_are_not_caught_above_the_core() -> None:
    for folder in ("api", "spark"):
        for path in (REPO / "src" / "topiclake" / folder).rglob("*.py"):
            assert "deltalake.exceptions" not in path.read_text(), path


def test_kafka_listener_never_imports_fastapi_or_pyspark() -> None:
    code = (
        "import sys\n"
        "import topiclake.kafka, topiclake.kafka.handlers\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'pyspark'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
