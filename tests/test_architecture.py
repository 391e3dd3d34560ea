"""Rules that keep the layers apart: the core and the gateway never load Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _import_graph import describe, import_graph, strongly_connected

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


# Import cycles (issue 15, item 8). The graph is static (tests/_import_graph.py says what counts as an edge):
# function-level imports count, imports under ``if TYPE_CHECKING:`` count only for the second rule.
# Each allow-list names the modules of a known cycle; it only ever shrinks, and its goal is to be empty.
KNOWN_CYCLES: list[set[str]] = []
KNOWN_TYPE_CYCLES: list[set[str]] = [*KNOWN_CYCLES]


def _new_cycles(type_checking: bool, known: list[set[str]]) -> list[str]:
    graph = import_graph(type_checking=type_checking)
    return [
        describe(graph, component)
        for component in strongly_connected(graph)
        if not any(set(component) <= allowed for allowed in known)
    ]


def test_no_import_cycle_between_modules() -> None:
    new = _new_cycles(type_checking=False, known=KNOWN_CYCLES)
    assert not new, "import cycles (break them; don't allow-list them):\n  " + "\n  ".join(new)


def test_no_import_cycle_even_for_the_type_checker() -> None:
    new = _new_cycles(type_checking=True, known=KNOWN_TYPE_CYCLES)
    assert not new, "import cycles through `if TYPE_CHECKING:` imports:\n  " + "\n  ".join(new)


def test_the_allow_lists_only_name_live_cycles() -> None:
    for type_checking, known in ((False, KNOWN_CYCLES), (True, KNOWN_TYPE_CYCLES)):
        live = [set(c) for c in strongly_connected(import_graph(type_checking=type_checking))]
        for allowed in known:
            assert any(c <= allowed and len(c & allowed) > 1 for c in live), f"{allowed} is broken: drop it"


def test_the_cycle_finder_finds_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "topiclake"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from topiclake.sub import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "sub" / "b.py").write_text("from topiclake import sub\nimport topiclake\n")
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from topiclake.sub.a import f\n"
    )
    (pkg / "sub" / "d.py").write_text("from .c import x\n")
    graph = import_graph(tmp_path)
    assert graph["topiclake.sub.a"] == {"topiclake.sub.b"}
    assert graph["topiclake.sub.b"] == {"topiclake.sub", "topiclake"}
    assert graph["topiclake.sub.c"] == set()
    assert graph["topiclake.sub.d"] == {"topiclake.sub.c"}
    assert import_graph(tmp_path, type_checking=True)["topiclake.sub.c"] == {"topiclake.sub.a"}
    # topiclake -> topiclake.sub.a -> .b -> topiclake; topiclake.sub (empty __init__) is not on the cycle.
    assert strongly_connected(graph) == [["topiclake", "topiclake.sub.a", "topiclake.sub.b"]]
    assert "topiclake -> topiclake.sub.a -> topiclake.sub.b -> topiclake" in describe(
        graph, strongly_connected(graph)[0]
    )


def test_no_import_cycle_between_subpackages() -> None:
    """Layers: platform never imports api, jobs never imports cli: no two subpackages import each other."""
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        top = ".".join(module.split(".")[:2])
        graph.setdefault(top, set()).update(".".join(m.split(".")[:2]) for m in imported)
    for top in graph:
        graph[top].discard(top)
    cycles = [describe(graph, component) for component in strongly_connected(graph)]
    assert not cycles, "cycles between subpackages:\n  " + "\n  ".join(cycles)


def test_spark_infrastructure_is_not_in_jobs() -> None:
    """The session builder and the jar cache are shared (topiclake.sparkenv): the data source, the CLI and the
    platform never reach into the jobs for them."""
    below_jobs = ("spark", "sparkenv", "platform", "api", "kafka", "cli.sql")

    def is_below(module: str) -> bool:
        return any(module == f"topiclake.{p}" or module.startswith(f"topiclake.{p}.") for p in below_jobs)

    for module, imported in import_graph().items():
        if is_below(module):
            bad = sorted(m for m in imported if m.startswith("topiclake.jobs"))
            assert not bad, f"{module} imports {bad}"


# Issue 26: the core in rooms. A module whose name starts with ``_`` is private to its package: nothing
# outside that package (or its subpackages) imports it. Each allow-list only ever shrinks; both are empty.
PRIVATE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()
ROOMS = "topiclake.platform"


def _private_imports() -> list[tuple[str, str]]:
    bad = []
    for module, imported in import_graph(type_checking=True).items():
        for target in imported:
            name = target.rsplit(".", 1)[-1]
            if not name.startswith("_") or name.startswith("__"):
                continue
            package = target.rsplit(".", 1)[0]
            if module != package and not module.startswith(package + "."):
                bad.append((module, target))
    return sorted(bad)


def test_private_modules_are_imported_only_inside_their_package() -> None:
    bad = [f"{m} imports {t}" for m, t in _private_imports() if (m, t) not in PRIVATE_IMPORTS_ALLOWED]
    assert not bad, "give the name a public home in its package:\n  " + "\n  ".join(bad)


def _room(module: str) -> str:
    """The room of a module of the core: its subpackage (``topiclake.platform.log``), or the module itself
    for the façade's top-level modules (``topiclake.platform.broker``); '' outside the core."""
    if module != ROOMS and not module.startswith(ROOMS + "."):
        return ""
    return ".".join(module.split(".")[:3])


def test_no_import_cycle_between_the_rooms_of_the_core() -> None:
    """log, groups, catalog, storage and cluster (and the façade's modules) form a graph without cycles:
    storage at the bottom, catalog above it, log and groups above that, the broker on top."""
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph(type_checking=True).items():
        room = _room(module)
        if room:
            graph.setdefault(room, set()).update(_room(m) for m in imported if _room(m) not in ("", room))
    assert {f"{ROOMS}.{n}" for n in ("log", "groups", "catalog", "storage", "cluster")} <= set(graph)
    cycles = [describe(graph, component) for component in strongly_connected(graph)]
    assert not cycles, "cycles between the rooms of the core:\n  " + "\n  ".join(cycles)


def test_the_core_keeps_a_short_top_level() -> None:
    top = sorted(p.stem for p in (REPO / "src" / "topiclake" / "platform").glob("*.py"))
    assert len(top) <= 12, f"platform/ has {len(top)} top-level modules; give the new ones a room: {top}"
