"""How a topiclake process ends: with the code of its work, output flushed, every time.

deltalake 1.6.6 can abort the interpreter while it finalizes (delta-io/delta-rs#2184: its Rust runtime's
threads race Python's teardown), turning a finished job into exit -6 (SIGABRT) that cron, Airflow or
Databricks count as a failure. :func:`run_and_exit` runs an entry point, then ends the process with
:func:`exit_now`: atexit handlers, logging and stdio flushed, then ``os._exit`` -- no finalization left
to abort. See docs/decisions.md ("Clean exit codes").

:func:`free_port` gives the servers a process starts (tests, benchmarks) a port no other process is
handed at the same time. See docs/decisions.md ("One free_port").
"""

from topiclake.process.exit import exit_now, owns_process, run_and_exit
from topiclake.process.ports import free_port

__all__ = ["exit_now", "free_port", "owns_process", "run_and_exit"]
