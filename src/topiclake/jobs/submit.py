"""spark-submit a topiclake job to a cluster with its code and dependencies shipped to the executors.

``python -m topiclake.jobs.submit [--master URL] JOB [JOB ARGS...]`` (wrapped by ``infra/submit.sh``):

- dependencies: the packed environment of :mod:`topiclake.jobs.pyenv` (built once, cached) goes as
  ``--archives <environment.tar.gz>#environment``; executors run ``./environment/bin/python``
  (``spark.pyspark.python``), so deltalake, pyarrow and pandas come from the archive, never from the
  driver's venv;
- code: the ``topiclake`` package as a zip in ``--py-files`` (rebuilt per submission, a few hundred kB);
- Delta's and S3A's jars from the local cache (:func:`topiclake.sparkenv.jars.jar_paths`,
  ``s3a_jar_paths``) as ``--jars``;
- the application file is a tiny generated launcher that imports ``MODULE`` and calls ``FUNCTION(args)``.

spark-submit runs in a scratch directory holding ``environment`` (a link to the unpacked environment)
because Spark runs Python data source planning on the driver with the same relative
``./environment/bin/python``. Relative ``--warehouse``/``--to-table`` paths are made absolute first, as
neither that directory nor an executor's working directory is the caller's.

JOB is ``compact``, ``retention``, ``compact-keys``, ``vacuum``, ``reprocess``, ``register-tables``,
``probe`` (reports which Python, deltalake and topiclake the executors use), or ``MODULE[:FUNCTION]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from topiclake.jobs.pyenv import PackedEnv, build_env, code_zip

logger = logging.getLogger(__name__)

#: Job names accepted by :func:`submit` and their ``module:function``.
JOBS: dict[str, str] = {
    "compact": "topiclake.jobs.compact:main",
    "retention": "topiclake.jobs.retention:main",
    "compact-keys": "topiclake.jobs.compact_keys:main",
    "vacuum": "topiclake.jobs.vacuum:main",
    "reprocess": "topiclake.jobs.reprocess:main",
    "register-tables": "topiclake.spark.catalog:main",
    "probe": "topiclake.jobs.submit:probe_main",
}
#: Where executors find the archive's Python (the archive is unpacked as ``environment``).
EXECUTOR_PYTHON = "./environment/bin/python"
#: Defaults for a cluster on this machine (a few cores), as get_spark sets them for ``local[*]``: Spark's
#: 200 shuffle partitions and Delta's 50-task snapshot rebuilds are minutes of scheduling on 2 cores.
SMALL_CLUSTER_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "4",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
}
#: Job flags whose values are local paths when they have no URI scheme.
_PATH_FLAGS = ("--warehouse", "--to-table")

_LAUNCHER = '''"""topiclake's spark-submit application: launch.py MODULE[:FUNCTION] [ARGS...]."""
import importlib
import sys

target, *args = sys.argv[1:]
module, _, function = target.partition(":")
sys.exit(getattr(importlib.import_module(module), function or "main")(args))
'''


def resolve_target(job: str) -> str:
    """Map a job name (``compact``...) or ``MODULE[:FUNCTION]`` to ``module:function``."""
    if job in JOBS:
        return JOBS[job]
    module, _, function = job.partition(":")
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"unknown job {job!r}: one of {', '.join(JOBS)} or MODULE[:FUNCTION]")
    return f"{module}:{function or 'main'}"


def absolutize_paths(args: Sequence[str], cwd: Path | None = None) -> list[str]:
    """Make relative local paths given to ``--warehouse``/``--to-table`` absolute (URIs are left alone)."""
    base = cwd or Path.cwd()

    def fix(value: str) -> str:
        if "://" in value or Path(value).is_absolute():
            return value
        return str((base / value).resolve())

    out: list[str] = []
    pending = False
    for arg in args:
        if pending:
            out.append(fix(arg))
            pending = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in _PATH_FLAGS and eq:
            out.append(f"{flag}={fix(value)}")
        else:
            out.append(arg)
            pending = arg in _PATH_FLAGS
    return out


def submit_command(
    target: str,
    args: Sequence[str],
    *,
    master: str,
    env: PackedEnv,
    code: Path,
    launcher: Path,
    jars: Sequence[str],
    py_files: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    driver_host: str = "127.0.0.1",
) -> list[str]:
    """Return the ``spark-submit`` command line for one job (see the module docstring)."""
    from topiclake.jobs.cluster import spark_home

    local = urlparse(master).hostname in {"127.0.0.1", "localhost"}
    settings = {
        **(SMALL_CLUSTER_CONF if local else {}),
        "spark.pyspark.python": EXECUTOR_PYTHON,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        **(conf or {}),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--master", master, "--deploy-mode", "client"),
        *("--name", f"topiclake {target}"),
        *("--archives", f"{env.archive}#environment"),
        *("--py-files", ",".join([str(code), *py_files])),
    ]
    if jars:
        command += ["--jars", ",".join(jars)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(launcher), target, *args]


def submit(
    job: str,
    args: Sequence[str] = (),
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    py_files: Sequence[str] = (),
    env: PackedEnv | None = None,
    driver_host: str = "127.0.0.1",
    capture_output: bool = False,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one topiclake job on ``master`` through spark-submit and wait for it.

    Args:
        job: A name of :data:`JOBS` or ``MODULE[:FUNCTION]`` (called with the job arguments).
        args: The job's own arguments (``--warehouse ... --topic ...``).
        master: Spark master URL, e.g. ``spark://127.0.0.1:7077``.
        conf: Extra ``--conf`` settings (they win).
        py_files: Extra files for ``--py-files`` (e.g. the module of a reprocess ``--transform``).
        env: The packed environment; default :func:`topiclake.jobs.pyenv.build_env` (cached).
        driver_host: Address the driver binds to and advertises to executors.
        capture_output: Capture stdout/stderr instead of inheriting them.
        timeout_s: Kill spark-submit after this long (``subprocess.TimeoutExpired``).

    Returns:
        The finished spark-submit process; its return code is the job's exit code.
    """
    from topiclake.jobs.cluster import spark_home
    from topiclake.sparkenv.jars import jar_paths, s3a_jar_paths

    target = resolve_target(job)
    packed = env or build_env()
    with _scratch_dir(packed) as scratch:
        launcher = scratch / "launch.py"
        launcher.write_text(_LAUNCHER)
        code = code_zip(scratch / "topiclake.zip")
        command = submit_command(
            target,
            absolutize_paths(args),
            master=master,
            env=packed,
            code=code,
            launcher=launcher,
            jars=jar_paths() + s3a_jar_paths(),
            py_files=[str(Path(f).resolve()) for f in py_files],
            conf=conf,
            driver_host=driver_host,
        )
        process_env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "PYSPARK_PYTHON": EXECUTOR_PYTHON,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # jobs' --master defaults to it; get_spark would otherwise replace spark-submit's master
            "TOPICLAKE_SPARK_MASTER": master,
        }
        if driver_host == "127.0.0.1":
            process_env["SPARK_LOCAL_IP"] = driver_host
        logger.info("submitting %s to %s (environment %s)", target, master, packed.key)
        return subprocess.run(
            command,
            cwd=scratch,
            env=process_env,
            stdin=subprocess.DEVNULL,
            capture_output=capture_output,
            text=True,
            timeout=timeout_s,
            check=False,
        )


@contextlib.contextmanager
def _scratch_dir(env: PackedEnv) -> Iterator[Path]:
    """A temporary working directory for spark-submit with ``environment`` linked to the unpacked env."""
    path = Path(tempfile.mkdtemp(prefix="topiclake-submit-"))
    try:
        (path / "environment").symlink_to(env.venv, target_is_directory=True)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---- probe: which Python and libraries do the executors run? -------------------------------------------


def _probe_partition(rows: Iterable[Any]) -> Iterator[str]:
    import deltalake
    import pyarrow

    import topiclake

    yield json.dumps(
        {
            "rows": sum(1 for _ in rows),
            "executable": sys.executable,
            "prefix": sys.prefix,
            "cwd": os.getcwd(),
            "deltalake": os.path.abspath(deltalake.__file__ or ""),
            "deltalake_version": deltalake.__version__,
            "pyarrow": os.path.abspath(pyarrow.__file__ or ""),
            "topiclake": os.path.abspath(topiclake.__file__ or ""),
        }
    )


def probe(spark: Any, partitions: int = 2) -> list[dict[str, Any]]:
    """Run one task per partition on the executors; each reports its Python, deltalake and topiclake."""
    rdd = spark.sparkContext.parallelize(range(partitions * 10), partitions)
    return [json.loads(line) for line in rdd.mapPartitions(_probe_partition).collect()]


def probe_main(argv: Sequence[str] | None = None) -> int:
    """``probe [--master URL] [--output FILE]``: write the executors' report as JSON (stdout by default)."""
    from topiclake.sparkenv.session import MASTER_ENV, get_spark

    p = argparse.ArgumentParser(prog="probe")
    p.add_argument("--master", default=os.environ.get(MASTER_ENV))
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)
    spark = get_spark(args.master, "topiclake-probe")
    report = {
        "master": spark.sparkContext.master,
        "driver": {"executable": sys.executable, "topiclake": __file__},
        "executors": probe(spark, args.partitions),
    }
    text = json.dumps(report, indent=2)
    if args.output is not None:
        args.output.write_text(text + "\n")
    else:
        print(text)
    return 0


# ---- CLI ----------------------------------------------------------------------------------------------


def _default_master() -> str | None:
    from topiclake.jobs.cluster import StandaloneCluster
    from topiclake.sparkenv.session import MASTER_ENV

    configured = os.environ.get(MASTER_ENV)
    if configured:
        return configured
    status = StandaloneCluster().status()
    return status.master_url if status.running else None


def parser() -> argparse.ArgumentParser:
    """Arguments of ``python -m topiclake.jobs.submit``."""
    p = argparse.ArgumentParser(
        prog="python -m topiclake.jobs.submit",
        description="spark-submit a topiclake job with the packed Python environment.",
    )
    p.add_argument(
        "--master",
        default=None,
        help="Spark master (default: $TOPICLAKE_SPARK_MASTER, else the cluster of infra/spark-cluster.sh)",
    )
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    p.add_argument("--py-files", action="append", default=[], metavar="FILE", help="extra --py-files")
    p.add_argument("--rebuild-env", action="store_true", help="rebuild the packed environment")
    p.add_argument("--pack-only", action="store_true", help="build the environment, print it, submit nothing")
    p.add_argument("job", nargs="?", help=f"{', '.join(JOBS)} or MODULE[:FUNCTION]")
    p.add_argument("job_args", nargs=argparse.REMAINDER, help="the job's own arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m topiclake.jobs.submit [--master URL] JOB [ARGS...]``; returns the job's exit code."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    env = build_env(force=args.rebuild_env)
    if args.pack_only:
        print(env.archive)
        return 0
    if not args.job:
        parser().error("JOB is required (or --pack-only)")
    master = args.master or _default_master()
    if master is None:
        parser().error(
            "no --master, no $TOPICLAKE_SPARK_MASTER and no running infra/spark-cluster.sh cluster"
        )
    conf = dict(item.split("=", 1) for item in args.conf)
    result = submit(args.job, args.job_args, master=master, conf=conf, py_files=args.py_files, env=env)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
