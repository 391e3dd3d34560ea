"""Ending the process with the work's exit code, skipping the interpreter finalization that may abort."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import NoReturn

#: Set (to anything non-empty) to end entry points the ordinary way (``sys.exit``), e.g. to debug teardown.
SOFT_EXIT_ENV = "TOPICLAKE_SOFT_EXIT"
#: Set by Databricks in its runtimes: a task's entry point runs inside a process Databricks keeps using.
MANAGED_RUNTIME_ENV = "DATABRICKS_RUNTIME_VERSION"
#: How long non-daemon threads may take to finish before the process ends without them.
THREAD_JOIN_S = 10.0


def _code_of(exc: SystemExit) -> int:
    """The exit status ``sys.exit(value)`` would give: None -> 0, int -> itself, anything else -> 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{exc.code}\n")
    return 1


def _flush(stream: object) -> None:
    flush = getattr(stream, "flush", None)
    if flush is None:
        return
    with contextlib.suppress(OSError, ValueError):  # closed stream, broken pipe: nothing more to write
        flush()


def _join_threads(deadline_s: float) -> None:
    """Wait (bounded) for non-daemon threads, as interpreter shutdown would, so no work is cut off."""
    end = time.monotonic() + deadline_s
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is current or thread.daemon or thread is threading.main_thread():
            continue
        thread.join(max(end - time.monotonic(), 0.0))


def owns_process() -> bool:
    """Whether an entry point called without arguments owns its process (False inside a Databricks task)."""
    return not os.environ.get(MANAGED_RUNTIME_ENV)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code``: join threads, run atexit handlers, flush logs and stdio, ``os._exit``.

    Everything an ordinary exit does for the program's own state happens; what is skipped is the
    interpreter's finalization of modules and native extensions, where delta-rs may abort.

    Args:
        code: The exit status (0-255; others are taken modulo 256 by the OS).
    """
    _join_threads(THREAD_JOIN_S)
    try:
        atexit._run_exitfuncs()  # logging.shutdown is one of them; handlers' errors are printed, not raised
    except BaseException:
        traceback.print_exc()
    logging.shutdown()
    _flush(sys.stdout)
    _flush(sys.stderr)
    _flush(sys.__stdout__)
    _flush(sys.__stderr__)
    os._exit(code & 0xFF if code >= 0 else 1)


def run_and_exit(entry: Callable[[], int | None]) -> NoReturn:
    """Run a process entry point and end the process with its code through :func:`exit_now`.

    ``entry`` may return a code (None is 0) or raise ``SystemExit`` (its code); Ctrl-C exits 130; any other
    exception prints its traceback and exits 1, as Python would.

    Args:
        entry: The work of the process (a CLI's or a job's ``main``).
    """
    try:
        result = entry()
        code = 0 if result is None else int(result)
    except SystemExit as exc:
        code = _code_of(exc)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    if os.environ.get(SOFT_EXIT_ENV):
        _flush(sys.stdout)
        _flush(sys.stderr)
        sys.exit(code)
    exit_now(code)
