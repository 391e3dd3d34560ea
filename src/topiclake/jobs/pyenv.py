"""The Python environment shipped to Spark executors: topiclake's runtime dependencies, packed once.

deltalake and pyarrow carry native code, so executors cannot get them from ``--py-files``; they get a whole
virtual environment as ``--archives <env>.tar.gz#environment`` and run ``./environment/bin/python``. The
environment holds exactly the versions installed here (the runtime closure of ``topiclake[spark]``, pinned
from this interpreter's installed distributions) but not topiclake itself: the project's code travels
separately as a small zip (:func:`code_zip`), so editing it never repacks the environment.

Built environments are cached under ``$TOPICLAKE_ENVS_DIR`` or ``~/.cache/topiclake/envs/<key>/`` where
``<key>`` hashes the pinned requirements, the Python version and the platform; a second build with the same
key is a no-op. Packing uses venv-pack (dev extra) and leaves out pyspark's jars (Python workers never load
them; the JVM side has its own).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

logger = logging.getLogger(__name__)

#: Environment variable naming the cache directory of packed environments.
ENVS_DIR_ENV = "TOPICLAKE_ENVS_DIR"
#: Bumped when the way environments are built changes, so old cache entries are not reused.
_FORMAT = 1
#: Files left out of the archive (venv-pack patterns, relative to the venv).
EXCLUDES = (
    "lib/python*/site-packages/pyspark/jars/*",
    "lib/python*/site-packages/pyspark/examples/*",
    "lib/python*/site-packages/pandas/tests/*",
    "lib/python*/site-packages/pyarrow/tests/*",
    "lib/python*/site-packages/pyarrow/include/*",
    "lib/python*/site-packages/numpy/*/tests/*",
    "*/__pycache__/*",
)
_READY = "READY"


@dataclass(frozen=True)
class PackedEnv:
    """A built environment.

    Attributes:
        key: Cache key (hash of requirements, Python and platform).
        venv: The unpacked virtual environment (the driver side uses it for Python data source planning).
        archive: ``environment.tar.gz`` for ``--archives <archive>#environment``.
        requirements: The pinned requirements installed in it.
        build_seconds: Time spent building it now (0.0 when it came from the cache).
    """

    key: str
    venv: Path
    archive: Path
    requirements: tuple[str, ...]
    build_seconds: float = 0.0


def envs_dir() -> Path:
    """Return ``$TOPICLAKE_ENVS_DIR`` or ``~/.cache/topiclake/envs``."""
    configured = os.environ.get(ENVS_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "topiclake" / "envs"


def runtime_requirements(distribution: str = "topiclake", extras: tuple[str, ...] = ("spark",)) -> list[str]:
    """Pin the runtime closure of ``distribution[extras]`` to the versions installed in this interpreter.

    The distribution itself is not included. Requirements whose markers do not apply here, and optional
    ones that are not installed, are skipped.

    Returns:
        Sorted ``name==version`` strings.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    queue: list[tuple[str, frozenset[str]]] = [(distribution, frozenset(extras))]
    root = canonicalize_name(distribution)
    while queue:
        name, wanted = queue.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        dist = metadata.distribution(name)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in (*wanted, "")
            ):
                continue
            key = canonicalize_name(req.name)
            if key == root:
                continue
            try:
                installed = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                logger.warning(
                    "requirement %s of %s is not installed; left out of the environment", req, name
                )
                continue
            pins[key] = f"{key}=={installed}"
            queue.append((key, frozenset(req.extras)))
    return sorted(pins.values())


def env_key(requirements: list[str] | tuple[str, ...]) -> str:
    """Hash what makes two environments interchangeable: requirements, Python, platform, build format."""
    payload = {
        "format": _FORMAT,
        "requirements": sorted(requirements),
        "python": sys.version,
        "base_prefix": sys.base_prefix,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "excludes": EXCLUDES,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_env(*, force: bool = False, compress_level: int = 1) -> PackedEnv:
    """Return the packed environment for this interpreter's topiclake dependencies, building it if needed.

    Safe to call from several processes at once (a file lock serializes builds of one key).

    Args:
        force: Rebuild even if a cached environment exists.
        compress_level: gzip level of the archive (1 packs several times faster than 6 and is barely
            larger: most of the bytes are native libraries).

    Raises:
        RuntimeError: pip or venv-pack failed (the message carries their output).
    """
    requirements = tuple(runtime_requirements())
    key = env_key(requirements)
    root = envs_dir() / key
    env = PackedEnv(key, root / "environment", root / "environment.tar.gz", requirements)
    with _locked(envs_dir() / f"{key}.lock"):
        ready = (root / _READY).exists() and env.archive.exists() and (env.venv / "bin" / "python").exists()
        if ready and not force:
            return env
        started = time.monotonic()
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        (root / "requirements.txt").write_text("\n".join(requirements) + "\n")
        logger.info("building executor environment %s (%d packages) in %s", key, len(requirements), root)
        _run([sys.executable, "-m", "venv", str(env.venv)])
        python = str(env.venv / "bin" / "python")
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, "-r", str(root / "requirements.txt")])
        installed = time.monotonic()
        _pack(env.venv, env.archive, compress_level)
        seconds = time.monotonic() - started
        size_mb = env.archive.stat().st_size / 2**20
        report = {
            "requirements": list(requirements),
            "seconds": round(seconds, 1),
            "archive_mib": round(size_mb),
        }
        (root / _READY).write_text(json.dumps(report) + "\n")
        logger.info(
            "built executor environment %s in %.1f s (install %.1f s, pack %.1f s; %.0f MiB archive)",
            key,
            seconds,
            installed - started,
            seconds - (installed - started),
            size_mb,
        )
        return PackedEnv(key, env.venv, env.archive, requirements, seconds)


def _pack(venv: Path, archive: Path, compress_level: int) -> None:
    try:
        import venv_pack
    except ImportError as exc:
        raise RuntimeError(
            "venv-pack is needed to pack the executors' environment: pip install venv-pack"
        ) from exc
    partial = archive.with_name(archive.name + ".partial")
    venv_pack.pack(
        prefix=str(venv),
        output=str(partial),
        format="tar.gz",
        compress_level=compress_level,
        force=True,
        filters=[("exclude", pattern) for pattern in EXCLUDES],
    )
    os.replace(partial, archive)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )


def code_zip(destination: Path) -> Path:
    """Zip the importable ``topiclake`` package (no caches) into ``destination`` for ``--py-files``."""
    import topiclake

    package = Path(topiclake.__file__).parent
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(destination, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in {".pyc", ".pyo"}:
                continue
            zf.write(path, Path("topiclake") / path.relative_to(package))
    return destination
