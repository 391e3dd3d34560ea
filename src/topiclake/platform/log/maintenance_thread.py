"""The broker's maintenance thread: runs each open topic's :class:`~.maintenance.TableMaintainer` when its
round is due. Split from :mod:`.maintenance` (what a round does)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from topiclake.platform.config import BrokerConfig
from topiclake.platform.log.maintenance import POLL_S, TableMaintainer


class Maintenance:
    """The broker's maintenance thread: runs every table's maintainer when its round is due (every
    ``maintenance_interval_ms``, and on a busy local table every ``compact_min_files`` versions).

    Args:
        maintainers: Returns the maintainers of the topics open now.
        config: Broker tuning.
    """

    def __init__(self, maintainers: Callable[[], list[TableMaintainer]], config: BrokerConfig) -> None:
        self._maintainers = maintainers
        self._interval = config.maintenance_interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="topiclake-maintenance", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(min(self._interval, POLL_S)):
            for maintainer in self._maintainers():
                if self._stop.is_set():
                    return
                if maintainer.due():
                    maintainer.run_once()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop after the round in progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
