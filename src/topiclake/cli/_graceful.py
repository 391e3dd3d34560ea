"""A uvicorn server whose graceful stop (SIGTERM, Ctrl+C) ends ``topiclake serve`` with exit code 0.

uvicorn >= 0.29 re-raises the signal it caught once it has shut down, so the process dies by that signal
(143 for SIGTERM) before atexit handlers and ``topiclake.process.exit_now`` run. After a graceful shutdown
-- the lifespan closed the broker, every commit is done -- the work succeeded: this server installs the
same handlers but does not re-raise, so ``serve`` returns and the process exits 0 through ``exit_now``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Generator

import uvicorn

#: The signals uvicorn handles.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulServer(uvicorn.Server):
    """``uvicorn.Server`` that stops on SIGINT/SIGTERM without re-raising the signal afterwards."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Install uvicorn's exit handler for the run, then restore the previous handlers."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
