"""Settings every test process inherits, and how pytest-xdist shares the suite between workers.

Brokers started by tests (``topiclake serve`` subprocesses) never take the well-known ports of a
developer's own services (8081 for the schema registry, 9092 for Kafka): those listeners are off unless a
test asks for one with an explicit, free port (a command-line option wins over the environment). Ports
come from :func:`topiclake.process.free_port`, which no two workers share.

``make test`` runs three workers for every two cores (``-n auto --dist loadgroup``, see
``pytest_xdist_auto_num_workers``) with the scheduler below, which deals out units of work longest first
(tests/xdist_units.py):

- every test that uses the in-process Spark session (tests/spark) is one unit on one worker, in one
  session-scoped Spark session; tests that start Spark JVMs of their own run beside it, one unit per file;
- any other file is one unit, so a module-scoped fixture (a secured gateway, a cluster, a console) starts
  once.

(xdist's own ``xdist_group`` marks do nothing under pytest 9.2: xdist 3.8 renames ``item._nodeid``, which
pytest no longer reads.)
"""

from __future__ import annotations

import os
import signal
from typing import Any

import cpu_durations
from xdist_units import longest_first, work_unit

os.environ.setdefault("TOPICLAKE_SCHEMA_REGISTRY_PORT", "0")
os.environ.setdefault("TOPICLAKE_KAFKA_PORT", "0")

#: JVM options for every Spark JVM the tests start: the in-process session's, ``topiclake sql``, a
#: pipeline or job process, spark-submit's driver (SPARK_SUBMIT_OPTS), the launcher JVM that spark-class runs
#: before each of them (SPARK_LAUNCHER_OPTS) and a standalone cluster's master and worker
#: (SPARK_DAEMON_JAVA_OPTS). A test's JVM does little work and lives seconds to a minute: the C1 compiler
#: alone and the serial collector cost far less CPU than C2 and the parallel collector's threads on 2
#: shared cores (measured in docs/decisions.md, "The suite's JVMs"); and the classes of the class path
#: (Spark's, Delta's, Spark SQL's generated code) are loaded without bytecode verification
#: (:data:`NO_VERIFY`), 13-15 % of a short Spark JVM's CPU ("The suite, fourth round").
NO_VERIFY = "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
SPARK_TEST_JAVA_OPTIONS = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData {NO_VERIFY}"
for _name in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_name, SPARK_TEST_JAVA_OPTIONS)

# Tests stop CLI processes with SIGINT, as Ctrl-C does. A suite started in the background by a shell
# without job control (`cmd &` in a script) inherits SIGINT *ignored*, and so does every process it
# starts: those CLI processes then never stop (reproduced: `bash -c 'python ... & wait'`). Handling SIGINT
# here again (a handled signal is reset to its default in a child at exec) gives them Ctrl-C back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: Any) -> None:
    cpu_durations.addoption(parser)


def pytest_configure(config: Any) -> None:
    cpu_durations.configure(config)


def pytest_xdist_auto_num_workers(config: Any) -> int:
    """``-n auto``: three workers for every two cores. Most of the suite's time is spent waiting -- for
    broker processes and JVMs to start, for heartbeats, sessions and timeouts to pass -- not computing: on
    2 cores, 3 workers took 1,135 s where 2 took 1,897 s on a comparably loaded machine (decisions.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores * 3 // 2)


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """Under ``--dist loadgroup``: xdist's load-scope scheduler over :func:`xdist_units.work_unit`,
    dealing the units out longest first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class _ByUnit(LoadScopeScheduling):  # type: ignore[misc]
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the first call comes with the whole work queue built
                self._ordered = True
                order = longest_first((unit, len(tests)) for unit, tests in self.workqueue.items())
                self.workqueue = OrderedDict((unit, self.workqueue[unit]) for unit in order)
            super()._assign_work_unit(node)

    return _ByUnit(config, log)
