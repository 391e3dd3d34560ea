"""Every broker's view of ``_system/quotas``: read at start, re-read when the table moves, applied to the
broker's :class:`~topiclake.security.quotas.Quotas`.

Like the ACLs, a background thread checks the table's version every ``poll_interval_s`` (one log listing,
no data read unless it moved), so a change made through any broker or by the CLI applies on every broker
within about a second (a minute on object storage, where each listing is a billed request and only other
processes' changes need it: an idle broker's requests, issue 28); the broker that made a change applies it
at once.
"""

from __future__ import annotations

import logging
import threading

from topiclake.errors import TopiclakeError
from topiclake.platform.storage import Storage
from topiclake.security.quota_table import KEYS, QuotaChange, QuotaMap, QuotaTable, principal_of
from topiclake.security.quotas import QuotaKind, Quotas

logger = logging.getLogger(__name__)

#: How often a broker on object storage looks for quota changes made elsewhere, seconds (1 s locally).
OBJECT_STORE_POLL_S = 60.0


class QuotaStore:
    """The table ``_system/quotas`` of a warehouse, kept applied to ``quotas``.

    Args:
        storage: The warehouse.
        quotas: The listeners' quotas (their defaults and deprecated overrides come from the settings).
        poll_interval_s: How often the background thread checks the table's version.
    """

    def __init__(self, storage: Storage, quotas: Quotas, poll_interval_s: float | None = None) -> None:
        self.table = QuotaTable(storage)
        self.quotas = quotas
        if poll_interval_s is None:  # a listing is billed on object storage: there a change takes <= 1 min
            poll_interval_s = 1.0 if storage.is_local else OBJECT_STORE_POLL_S
        self.poll_interval_s = poll_interval_s
        self._version = -1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def refresh(self) -> None:
        """Re-read the table if its version moved and apply it."""
        with self._lock:
            version = self.table.version()
            if version == self._version:
                return
            version, configured = self.table.read()
            applied: dict[str | None, dict[QuotaKind, float]] = {
                principal_of(user): {KEYS[k]: v for k, v in values.items() if k in KEYS}
                for user, values in configured.items()
            }
            self.quotas.configure(applied)
            self._version = version
            logger.info("quotas at version %d: %d entities", version, len(configured))

    def describe(self) -> QuotaMap:
        """Every user's quotas (None: the default user), fresh from the table."""
        self.refresh()
        return self.table.read()[1]

    def alter(self, changes: list[QuotaChange], what: str) -> int:
        """Write ``changes`` in one commit and apply them here at once; the table version.

        Raises:
            InvalidConfig: An unknown key or a negative value (nothing written).
            CommitConflict, StorageError: As :meth:`QuotaTable.alter`.
        """
        version = self.table.alter(changes, what)
        self.refresh()
        return version

    def start(self) -> None:
        """Apply the table now and poll it in a background thread."""
        if self._poller is not None:
            return
        try:
            self.refresh()
        except TopiclakeError as exc:  # the settings' quotas apply meanwhile
            logger.warning("cannot read the quotas: %s", exc.message)
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll, name="quota-poller", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            try:
                self.refresh()
            except TopiclakeError as exc:  # keep the quotas last read
                logger.warning("cannot refresh the quotas: %s", exc.message)

    def close(self) -> None:
        """Stop the background poll (if started)."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
            self._poller = None
