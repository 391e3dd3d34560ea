"""A Spark standalone cluster on 127.0.0.1 from the pyspark distribution: one master and one worker.

``python -m topiclake.jobs.cluster start|stop|status`` (wrapped by ``infra/spark-cluster.sh``) runs
pyspark's own ``bin/spark-class`` for ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``. Everything the two daemons write (logs, pid files, the worker's
per-application work directories) lives in one state directory, ``$TOPICLAKE_CLUSTER_DIR`` or
``./.spark-cluster``; ``cluster.json`` there records the ports so ``status`` and ``stop`` find them again.
Every socket is bound to 127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``), web UIs included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from topiclake.jobs._daemons import alive, command_line, terminate_group
from topiclake.process import free_port

logger = logging.getLogger(__name__)

#: Environment variable naming the state directory (default ``./.spark-cluster``).
CLUSTER_DIR_ENV = "TOPICLAKE_CLUSTER_DIR"
DEFAULT_CLUSTER_DIR = ".spark-cluster"
HOST = "127.0.0.1"

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_SPEC_FILE = "cluster.json"
#: Lines the daemons log once they are ready.
_WORKER_REGISTERED = "Successfully registered with master"


def spark_home() -> Path:
    """Return the Spark distribution bundled with pyspark (the package directory, with bin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def default_state_dir() -> Path:
    """Return ``$TOPICLAKE_CLUSTER_DIR`` or ``./.spark-cluster``."""
    return Path(os.environ.get(CLUSTER_DIR_ENV) or DEFAULT_CLUSTER_DIR)


@dataclass(frozen=True)
class ClusterSpec:
    """Ports and sizes of a local standalone cluster.

    Attributes:
        master_port: The master's RPC port (``spark://127.0.0.1:<master_port>``).
        master_webui_port: The master's web UI port.
        worker_webui_port: The worker's web UI port.
        worker_cores: Cores the worker offers to executors.
        worker_memory: Memory the worker offers to executors (``2g``).
        daemon_memory: Heap of the master and worker daemons themselves.
        app_data_ttl_s: Finished applications' work directories (each holds an unpacked Python
            environment) older than this are deleted by the worker.
    """

    master_port: int = 7077
    master_webui_port: int = 8080
    worker_webui_port: int = 8081
    worker_cores: int = 2
    worker_memory: str = "2g"
    daemon_memory: str = "512m"
    app_data_ttl_s: int = 24 * 3600

    @classmethod
    def with_free_ports(cls, **overrides: object) -> ClusterSpec:
        """A spec whose three ports are free on 127.0.0.1 (for tests and side-by-side clusters)."""
        ports = {
            "master_port": free_port(),
            "master_webui_port": free_port(),
            "worker_webui_port": free_port(),
        }
        return cls(**{**ports, **overrides})  # type: ignore[arg-type]

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<master_port>``."""
        return f"spark://{HOST}:{self.master_port}"


@dataclass(frozen=True)
class ClusterStatus:
    """What ``status`` reports.

    Attributes:
        master_url: The URL to pass as ``--master``.
        master_ui: The master's web UI.
        worker_ui: The worker's web UI.
        master_pid: Pid of the running master, or None.
        worker_pid: Pid of the running worker, or None.
        state_dir: Where logs, pid files and work directories are.
    """

    master_url: str
    master_ui: str
    worker_ui: str
    master_pid: int | None
    worker_pid: int | None
    state_dir: Path

    @property
    def running(self) -> bool:
        """Both daemons are alive."""
        return self.master_pid is not None and self.worker_pid is not None


class ClusterError(RuntimeError):
    """A daemon did not start (its log says why)."""


class StandaloneCluster:
    """Start, stop and inspect one master and one worker whose state lives in ``state_dir``.

    Usable as a context manager (start on enter, stop on exit), which is how tests use it.
    """

    def __init__(self, state_dir: Path | str | None = None, spec: ClusterSpec | None = None) -> None:
        """Bind to a state directory; ``spec`` defaults to the one recorded there, else the defaults.

        Args:
            state_dir: Directory for logs, pids and work dirs; default :func:`default_state_dir`.
            spec: Ports and sizes; ignored by :meth:`status`/:meth:`stop` when the directory records one.
        """
        self.state_dir = Path(state_dir or default_state_dir()).absolute()
        recorded = self._recorded_spec()
        self.spec = spec or recorded or ClusterSpec()
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    # ---- paths -------------------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """Daemon logs: ``master.log``, ``worker.log``."""
        return self.state_dir / "logs"

    @property
    def work_dir(self) -> Path:
        """The worker's work directory: one ``app-*/<executor id>/`` per application (stdout, stderr,
        fetched ``--py-files`` and unpacked ``--archives``)."""
        return self.state_dir / "work"

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``."""
        return self.spec.master_url

    def _pid_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def _recorded_spec(self) -> ClusterSpec | None:
        path = self.state_dir / _SPEC_FILE
        if not path.exists():
            return None
        return ClusterSpec(**json.loads(path.read_text()))

    # ---- lifecycle ---------------------------------------------------------------------------------

    def status(self) -> ClusterStatus:
        """Report URLs and which daemons are alive."""
        return ClusterStatus(
            master_url=self.master_url,
            master_ui=f"http://{HOST}:{self.spec.master_webui_port}",
            worker_ui=f"http://{HOST}:{self.spec.worker_webui_port}",
            master_pid=self._alive_pid("master"),
            worker_pid=self._alive_pid("worker"),
            state_dir=self.state_dir,
        )

    def start(self, timeout_s: float = 120.0) -> ClusterStatus:
        """Start the master, then the worker, and wait until the worker has registered.

        Starting a cluster that is already running is a no-op.

        Raises:
            ClusterError: a daemon exited or did not become ready within ``timeout_s``.
        """
        recorded = self._recorded_spec()
        if recorded is not None and recorded != self.spec and self.status().running:
            self.spec = recorded  # already running with the ports it was started with
        current = self.status()
        if current.running:
            logger.info("spark cluster already running at %s", current.master_url)
            return current
        if current.master_pid is not None or current.worker_pid is not None:
            self.stop()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / _SPEC_FILE).write_text(json.dumps(asdict(self.spec), indent=2) + "\n")
        deadline = time.monotonic() + timeout_s
        spec = self.spec
        try:
            self._launch(
                "master",
                [
                    _MASTER_CLASS,
                    *("--host", HOST, "--port", str(spec.master_port)),
                    *("--webui-port", str(spec.master_webui_port)),
                ],
            )
            self._wait_for_port("master", spec.master_port, deadline)
            self._launch(
                "worker",
                [
                    *(_WORKER_CLASS, spec.master_url, "--host", HOST),
                    *("--cores", str(spec.worker_cores), "--memory", spec.worker_memory),
                    *("--webui-port", str(spec.worker_webui_port), "--work-dir", str(self.work_dir)),
                ],
            )
            self._wait_for_log("worker", _WORKER_REGISTERED, deadline)
        except BaseException:
            self.stop()
            raise
        logger.info("spark cluster started at %s (state in %s)", spec.master_url, self.state_dir)
        return self.status()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the worker (and the executors it runs), then the master; idempotent."""
        for name in ("worker", "master"):
            pid = self._alive_pid(name)
            if pid is not None:
                terminate_group(pid, timeout_s)
                logger.info("stopped spark %s (pid %d)", name, pid)
            self._pid_file(name).unlink(missing_ok=True)

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- helpers -----------------------------------------------------------------------------------

    def _daemon_env(self) -> dict[str, str]:
        home = spark_home()
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(home),
                "SPARK_LOCAL_IP": HOST,
                "SPARK_LOCAL_HOSTNAME": HOST,
                "SPARK_DAEMON_MEMORY": self.spec.daemon_memory,
                "SPARK_LOG_DIR": str(self.log_dir),
                "SPARK_PID_DIR": str(self.state_dir),
                "SPARK_WORKER_DIR": str(self.work_dir),
                # no REST submission server: only the RPC port and the (127.0.0.1) web UI listen
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
                f"-Dspark.worker.cleanup.appDataTtl={self.spec.app_data_ttl_s}",
            }
        )
        # the caller's Python settings would leak into every executor: the application chooses its Python
        for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT"):
            env.pop(name, None)
        return env

    def _launch(self, name: str, args: Sequence[str]) -> None:
        spark_class = spark_home() / "bin" / "spark-class"
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            # own process group: stop() ends the daemon and everything it started (executors)
            process = subprocess.Popen(
                [str(spark_class), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._daemon_env(),
                cwd=self.state_dir,
                start_new_session=True,
            )
        self._processes[name] = process
        self._pid_file(name).write_text(f"{process.pid}\n")
        logger.info("started spark %s (pid %d), log %s", name, process.pid, log_path)

    def _alive_pid(self, name: str) -> int | None:
        path = self._pid_file(name)
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        # a stale pid file must never make stop() signal an unrelated process that reused the pid
        main_class = _MASTER_CLASS if name == "master" else _WORKER_CLASS
        return pid if alive(pid) and main_class in command_line(pid) else None

    def _check_alive(self, name: str) -> None:
        process = self._processes.get(name)
        if process is None or process.poll() is not None:
            raise ClusterError(
                f"spark {name} exited; see {self.log_dir / (name + '.log')}:\n{self._tail(name)}"
            )

    def _tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _wait_for_port(self, name: str, port: int, deadline: float) -> None:
        while True:
            self._check_alive(name)
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"spark {name} did not listen on {HOST}:{port}:\n{self._tail(name)}")
            time.sleep(0.25)

    def _wait_for_log(self, name: str, needle: str, deadline: float) -> None:
        path = self.log_dir / f"{name}.log"
        while True:
            self._check_alive(name)
            with contextlib.suppress(OSError):
                if needle in path.read_text(errors="replace"):
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"spark {name} not ready ({needle!r} not logged):\n{self._tail(name)}")
            time.sleep(0.25)


def _print_status(status: ClusterStatus) -> None:
    def state(pid: int | None) -> str:
        return f"running (pid {pid})" if pid is not None else "stopped"

    print(f"master   {status.master_url}  {state(status.master_pid)}")
    print(f"master UI {status.master_ui}")
    print(f"worker   {state(status.worker_pid)}")
    print(f"worker UI {status.worker_ui}")
    print(f"state    {status.state_dir}  (logs in logs/, executors in work/)")


def parser() -> argparse.ArgumentParser:
    """Arguments of ``python -m topiclake.jobs.cluster``."""
    defaults = ClusterSpec()
    p = argparse.ArgumentParser(
        prog="python -m topiclake.jobs.cluster",
        description="A Spark standalone cluster (one master, one worker) on 127.0.0.1.",
    )
    p.add_argument("command", choices=["start", "stop", "status"])
    p.add_argument(
        "--dir", type=Path, default=None, help=f"state directory (${CLUSTER_DIR_ENV} or ./.spark-cluster)"
    )
    p.add_argument("--port", type=int, default=defaults.master_port, help="master RPC port")
    p.add_argument("--webui-port", type=int, default=defaults.master_webui_port, help="master web UI port")
    p.add_argument("--worker-webui-port", type=int, default=defaults.worker_webui_port)
    p.add_argument("--cores", type=int, default=defaults.worker_cores, help="cores the worker offers")
    p.add_argument("--memory", default=defaults.worker_memory, help="memory the worker offers")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.cluster start|stop|status``."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "start":
        spec = ClusterSpec(
            master_port=args.port,
            master_webui_port=args.webui_port,
            worker_webui_port=args.worker_webui_port,
            worker_cores=args.cores,
            worker_memory=args.memory,
        )
        cluster = StandaloneCluster(args.dir, spec)
        try:
            _print_status(cluster.start())
        except ClusterError as exc:
            print(f"ClusterError: {exc}", file=sys.stderr)
            return 1
        return 0
    cluster = StandaloneCluster(args.dir)
    if args.command == "stop":
        cluster.stop()
        return 0
    status = cluster.status()
    _print_status(status)
    return 0 if status.running else 3


@contextlib.contextmanager
def local_cluster(state_dir: Path | str, spec: ClusterSpec | None = None) -> Iterator[StandaloneCluster]:
    """A started cluster on free ports that is always stopped on exit (for tests)."""
    cluster = StandaloneCluster(state_dir, spec or ClusterSpec.with_free_ports())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
