"""Settings every test process inherits, and how pytest-xdist shares the suite between workers.

Brokers started by tests (``topiclake serve`` subprocesses) never take the well-known ports of a
developer's own services (8081 for the schema registry, 9092 for Kafka): those listeners are off unless a
test asks for one with an explicit, free port (a command-line option wins over the environment). Ports
come from :func:`topiclake.process.free_port`, which no two workers share.

``make test`` runs on every core with ``--dist loadgroup``: single tests are dealt out one by one, but a
test that shares an expensive fixture stays with the others sharing it (an ``xdist_group``):

- every test that starts Spark (tests/spark and Spark's Kafka connector) runs on one worker, in one
  session-scoped Spark session, so there is one Spark JVM at a time;
- the tests of a module with a module-scoped fixture (a secured gateway, a cluster, a console) run on one
  worker, which starts that fixture once.

Single tests marked ``slow`` are dealt out before the others.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOPICLAKE_SCHEMA_REGISTRY_PORT", "0")
os.environ.setdefault("TOPICLAKE_KAFKA_PORT", "0")

_TESTS = Path(__file__).parent
#: Tests outside tests/spark that start a Spark JVM of their own.
_SPARK_ELSEWHERE = frozenset({"kafka/test_spark.py"})
_SHARED_SCOPES = frozenset({"class", "module", "package"})


def _group(item: pytest.Item) -> str | None:
    """The xdist group of ``item``: ``spark``, its module's path, or None (free to go anywhere)."""
    try:
        module = item.path.relative_to(_TESTS).as_posix()
    except ValueError:
        return None
    if module.startswith("spark/") or module in _SPARK_ELSEWHERE:
        return "spark"
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for defs in info.name2fixturedefs.values():
            if any(d.scope in _SHARED_SCOPES for d in defs):
                return module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    grouped: set[str] = set()
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            grouped.add(item.nodeid)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist deals out the biggest groups first, then single tests in this order: the slow ones first,
        # so that no slow test is left to run alone at the end (the sort is stable, as every worker's is)
        items.sort(key=lambda i: i.nodeid in grouped or i.get_closest_marker("slow") is None)
